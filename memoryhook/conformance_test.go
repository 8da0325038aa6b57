package memoryhook_test

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/storetest"
)

func newFileStore(t *testing.T) *memoryhook.FileStore {
	t.Helper()
	st, err := memoryhook.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestFileStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) memoryhook.Store { return newFileStore(t) })
}

func TestFileStoreContinuationsConformance(t *testing.T) {
	storetest.RunContinuations(t, func(t *testing.T) memoryhook.Continuations { return newFileStore(t) })
}

func TestFileStoreHistoryConformance(t *testing.T) {
	storetest.RunHistory(t, func(t *testing.T) memoryhook.Governed { return newFileStore(t) })
}
