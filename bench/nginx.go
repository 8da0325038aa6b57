package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Row N is nginx in front of the same fake upstream: the reverse proxy most
// deployments would otherwise put there (ctxproxy aims to be ahead of
// it on 1 MiB transcripts). The bench starts Debian's nginx itself, as its
// own process tree, with a config written into the run's work folder: every
// path nginx writes (pid, lock, temp folders, error log) is under that
// folder, it runs as the current user, and nothing under /etc or /var is
// read or written.

// nginxBinary is the nginx to run: CTXPROXY_BENCH_NGINX, else Debian's
// /usr/sbin/nginx, else nginx in PATH; "" when there is none (also when
// CTXPROXY_BENCH_NGINX names a file that is not there: that is how to run
// the bench as on a machine without nginx).
func nginxBinary() string {
	if p := os.Getenv("CTXPROXY_BENCH_NGINX"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	return ""
}

var nginxVersionRe = regexp.MustCompile(`nginx/(\d+\.\d+)`)

// nginxVersion is "1.22" from `nginx -v` (which prints to stderr), or "".
func nginxVersion(bin string) string {
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	if m := nginxVersionRe.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// nginxWorkers is worker_processes: one per CPU the Go servers of the
// other rows use (GOMAXPROCS), what nginx's "auto" means, but fixed here
// so the row name says it.
func nginxWorkers() int { return runtime.GOMAXPROCS(0) }

// nginxRowName names row N with what ran.
func nginxRowName(version string, workers int) string {
	if version == "" {
		version = "?"
	}
	return fmt.Sprintf("nginx %s proxy_pass, keepalive, buffering off (master + %d workers)", version, workers)
}

// nginxConf is what the config template needs.
type nginxConf struct {
	Dir      string // the instance's folder: pid, lock, temp paths
	ErrorLog string
	Listen   string // 127.0.0.1:port
	Upstream string // the fake's host:port
	Workers  int
	User     string // "user group" when nginx starts as root, so the workers stay root ("" otherwise)
}

// The config of a competent proxy_pass for this API: upstream keep-alive
// (HTTP/1.1, no Connection header passed on), no buffering either way (so
// SSE events pass as they come and a 1 MiB body streams through), bodies up
// to 64 MiB. Keep-alive requests per connection are unbounded in practice,
// as in the Go servers; access logging is off, as ctxproxy logs nothing per
// request at --log-level=warn.
var nginxTemplate = template.Must(template.New("nginx.conf").Parse(`daemon off;
master_process on;
worker_processes {{.Workers}};
worker_rlimit_nofile 16384;
{{if .User}}user {{.User}};
{{end}}pid {{.Dir}}/nginx.pid;
lock_file {{.Dir}}/nginx.lock;
error_log {{.ErrorLog}} warn;

events {
    worker_connections 4096;
}

http {
    access_log off;
    client_body_temp_path {{.Dir}}/client_body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;

    upstream fake {
        server {{.Upstream}};
        keepalive 128;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }

    server {
        listen {{.Listen}};
        client_max_body_size 64m;

        location / {
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 600s;
            proxy_send_timeout 600s;
        }
    }
}
`))

func (c nginxConf) render() (string, error) {
	var b bytes.Buffer
	if err := nginxTemplate.Execute(&b, c); err != nil {
		return "", fmt.Errorf("nginx config: %w", err)
	}
	return b.String(), nil
}

// nginxUser is the user directive's value when this process is root (nginx
// would otherwise run its workers as nobody, who cannot use the work
// folder); "" when it is not (nginx then runs as the current user anyway).
func nginxUser() string {
	if os.Geteuid() != 0 {
		return ""
	}
	u, err := user.Current()
	if err != nil {
		return "root root"
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return u.Username + " " + u.Username
	}
	return u.Username + " " + g.Name
}

// freePort is a port on 127.0.0.1 that was free a moment ago: nginx cannot
// listen on port 0, so the bench asks the kernel for one, closes it and
// hands it to nginx (retrying if someone took it in between).
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// errAddrInUse: the port was taken between freePort and nginx's bind.
var errAddrInUse = errors.New("address in use")

// startNginx runs nginx in front of upstream (host:port) on a free port of
// 127.0.0.1, retrying with another port when the bind fails.
func startNginx(workDir, name, bin, upstream string) (*child, error) {
	var err error
	for range 5 {
		var c *child
		if c, err = startNginxOnce(workDir, name, bin, upstream); !errors.Is(err, errAddrInUse) {
			return c, err
		}
	}
	return nil, err
}

func startNginxOnce(workDir, name, bin, upstream string) (*child, error) {
	addr, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("%s: free port: %w", name, err)
	}
	dir := filepath.Join(workDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	errPath := filepath.Join(workDir, name+".stderr")
	conf := nginxConf{Dir: dir, ErrorLog: errPath, Listen: addr, Upstream: upstream, Workers: nginxWorkers(), User: nginxUser()}
	text, err := conf.render()
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// nginx appends to its error log; its stderr (messages before the
	// config is read) joins the same file, opened for append too, and
	// emptied: what an earlier attempt logged is not this one's.
	errf, err := os.OpenFile(errPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// -e: the log nginx writes before it has read the config (its built-in
	// default is outside the work folder on some builds).
	cmd := exec.Command(bin, "-e", errPath, "-p", dir+"/", "-c", confPath)
	cmd.Stdout, cmd.Stderr = errf, errf
	// Its own process group, so a master that will not stop is killed with
	// its workers; SIGTERM (nginx's fast shutdown, which ends the workers)
	// if the bench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		errf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c := &child{name: name, pid: cmd.Process.Pid, addr: addr, errPath: errPath, tree: true, flush: func() {}}
	c.end = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		errf.Close()
	}
	if err := waitNginx(c, filepath.Join(dir, "nginx.pid"), exited); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitNginx waits until nginx has written its pid file, which it does after
// binding its listening socket, or has exited (a bind failure ends it after
// about 2 s of retries).
func waitNginx(c *child, pidPath string, exited <-chan struct{}) error {
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			tail := c.stderrTail()
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("%s on %s: %w", c.name, c.addr, errAddrInUse)
			}
			return fmt.Errorf("%s exited at start: %s", c.name, tail)
		case <-deadline:
			return fmt.Errorf("%s did not start within 30s: %s", c.name, c.stderrTail())
		case <-tick.C:
			b, err := os.ReadFile(pidPath)
			if err != nil {
				continue
			}
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid == c.pid {
				return nil
			}
		}
	}
}
