// Package binaries builds the real ctxproxy and fakeapi commands and runs
// them as processes, as a user would, for the tests and harnesses that drive
// the binaries rather than the packages.
package binaries

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Import paths of the commands, so Build works from any folder of the module.
const (
	Ctxproxy = "github.com/ctxproxy/ctxproxy/cmd/ctxproxy"
	Fakeapi  = "github.com/ctxproxy/ctxproxy/cmd/fakeapi"
)

// Build runs go build -o out pkg, with -race when race is set.
func Build(ctx context.Context, out, pkg string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	b, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Process is a started binary that logs JSON lines to stderr.
type Process struct {
	Addr string // the addr field of its ready line
	// Addrs holds the addr field of each line before the ready line that
	// has one, by msg (say, a second listener's).
	Addrs map[string]string

	cmd     *exec.Cmd
	mu      sync.Mutex
	log     strings.Builder
	dropLog bool          // Log no longer keeps lines
	drained chan struct{} // its stderr is read to the end
	done    chan struct{} // it has exited
	err     error         // its exit error, once done
}

// Start runs cmd and waits (up to 30s, or until ctx ends) for the JSON log
// line whose msg is readyMsg, and takes its addr, and those of the lines
// before it (Addrs). Stderr is kept (see Log)
// and copied to echo if that is not nil; stdout, unless cmd sets it, joins
// stderr. If the line does not come, the process is stopped and the error
// holds its log.
func Start(ctx context.Context, cmd *exec.Cmd, readyMsg string, echo io.Writer) (*Process, error) {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if cmd.Stdout == nil {
		cmd.Stdout = cmd.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{Addrs: map[string]string{}, cmd: cmd, drained: make(chan struct{}), done: make(chan struct{})}
	name := filepath.Base(cmd.Path)
	addrc := make(chan string, 1)
	go func() {
		defer close(p.drained)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		found := false
		for sc.Scan() {
			p.mu.Lock()
			if !p.dropLog {
				p.log.WriteString(sc.Text() + "\n")
			}
			p.mu.Unlock()
			if echo != nil {
				fmt.Fprintln(echo, name+":", sc.Text())
			}
			var l struct{ Msg, Addr string }
			if !found && json.Unmarshal(sc.Bytes(), &l) == nil && l.Addr != "" {
				if l.Msg == readyMsg {
					found = true
					addrc <- l.Addr // Addrs is complete: no writes after this
				} else {
					p.Addrs[l.Msg] = l.Addr
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // a line over the limit stops the scanner
	}()
	go func() {
		<-p.drained // Wait closes the pipe; read it to the end first
		p.err = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.Addr = <-addrc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before logging %q: %v\n%s", name, readyMsg, p.err, p.Log())
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	p.Stop()
	return nil, fmt.Errorf("%s did not log %q:\n%s", name, readyMsg, p.Log())
}

// Log is what the process has logged so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// DropLog stops keeping what the process logs from now on (echo still
// gets it): for a long run whose log would otherwise grow without bound.
func (p *Process) DropLog() {
	p.mu.Lock()
	p.dropLog = true
	p.mu.Unlock()
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed when the process has exited; Err is its exit error then.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Process) Err() error { return p.err }

// Kill kills the process and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop asks the process to stop (SIGTERM), kills it after 10s, and returns
// its exit code (-1 when a signal ended it).
func (p *Process) Stop() int {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
	return p.cmd.ProcessState.ExitCode()
}
