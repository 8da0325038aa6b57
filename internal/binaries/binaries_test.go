package binaries

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as the started process, as BINARIES_HELPER says.
func TestMain(m *testing.M) {
	switch os.Getenv("BINARIES_HELPER") {
	case "ready":
		fmt.Fprintln(os.Stderr, `{"msg":"starting"}`)
		fmt.Fprintln(os.Stderr, `{"msg":"second listener","addr":"127.0.0.1:99"}`)
		fmt.Fprintln(os.Stderr, `{"msg":"helper listening","addr":"127.0.0.1:1234"}`)
		time.Sleep(time.Minute) // until Stop's SIGTERM
		os.Exit(0)
	case "exit":
		fmt.Fprintln(os.Stderr, "no ready line")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func helper(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BINARIES_HELPER="+mode)
	return cmd
}

func TestStartTakesTheAddrsOfTheReadyLineAndThoseBeforeAndStopEndsTheProcess(t *testing.T) {
	p, err := Start(context.Background(), helper("ready"), "helper listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr != "127.0.0.1:1234" {
		t.Errorf("Addr = %q, want the ready line's addr", p.Addr)
	}
	if got := p.Addrs["second listener"]; got != "127.0.0.1:99" {
		t.Errorf(`Addrs["second listener"] = %q, want the addr of that earlier line`, got)
	}
	if code := p.Stop(); code != -1 {
		t.Errorf("Stop: exit code %d, want -1 (ended by SIGTERM)", code)
	}
	if !strings.Contains(p.Log(), `{"msg":"starting"}`) {
		t.Errorf("Log lacks the first line:\n%s", p.Log())
	}
}

func TestStartFailsWithTheLogWhenTheProcessExitsFirst(t *testing.T) {
	_, err := Start(context.Background(), helper("exit"), "helper listening", nil)
	if err == nil || !strings.Contains(err.Error(), "no ready line") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want the exit status and the log", err)
	}
}
