package memoryhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The shared behaviour is in storetest.RunContinuations; this is the file
// store's own risk: the reply id comes from a client.
func TestFileContinuationsNeverUseTheClientsIDAsAFileName(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hostile := "../../../etc/passwd"
	if err := s.PutContinuation(t.Context(), "acme", hostile, []byte("x"), time.Hour); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if strings.Contains(p, "passwd") || strings.Contains(p, "..") {
			t.Errorf("hostile id reached the file system as %s", p)
		}
		return nil
	})
	if got, _ := s.GetContinuation(t.Context(), "acme", hostile); string(got) != "x" {
		t.Fatalf("got %q", got)
	}
}
