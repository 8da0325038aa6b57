package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestNginxConfig(t *testing.T) {
	tests := []struct {
		name    string
		conf    nginxConf
		want    []string
		notWant []string
	}{
		{
			name: "as a user",
			conf: nginxConf{Dir: "/w/n", ErrorLog: "/w/n.stderr", Listen: "127.0.0.1:4000", Upstream: "127.0.0.1:5000", Workers: 2},
			want: []string{
				"daemon off;", "master_process on;", "worker_processes 2;",
				"pid /w/n/nginx.pid;", "error_log /w/n.stderr warn;", "lock_file /w/n/nginx.lock;",
				"client_body_temp_path /w/n/client_body;", "proxy_temp_path /w/n/proxy;",
				"fastcgi_temp_path /w/n/fastcgi;", "uwsgi_temp_path /w/n/uwsgi;", "scgi_temp_path /w/n/scgi;",
				"server 127.0.0.1:5000;", "keepalive 128;", "listen 127.0.0.1:4000;",
				"proxy_pass http://fake;", "proxy_http_version 1.1;", `proxy_set_header Connection "";`,
				"proxy_buffering off;", "proxy_request_buffering off;", "client_max_body_size 64m;",
				"access_log off;",
			},
			notWant: []string{"user ", "/var/", "/etc/"},
		},
		{
			name: "as root",
			conf: nginxConf{Dir: "/w/n", ErrorLog: "/w/n.stderr", Listen: "127.0.0.1:4000", Upstream: "127.0.0.1:5000", Workers: 4, User: "root root"},
			want: []string{"user root root;", "worker_processes 4;"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.conf.render()
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("config lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("config has %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestNginxRowName(t *testing.T) {
	for _, tt := range []struct {
		version string
		workers int
		want    string
	}{
		{"1.22", 2, "nginx 1.22 proxy_pass, keepalive, buffering off (master + 2 workers)"},
		{"", 1, "nginx ? proxy_pass, keepalive, buffering off (master + 1 workers)"},
	} {
		if got := nginxRowName(tt.version, tt.workers); got != tt.want {
			t.Errorf("nginxRowName(%q, %d) = %q, want %q", tt.version, tt.workers, got, tt.want)
		}
	}
}

// TestNginxConfigValid has nginx itself check the rendered config (nginx -t),
// when nginx is installed.
func TestNginxConfigValid(t *testing.T) {
	bin := nginxBinary()
	if bin == "" {
		t.Skip("nginx is not installed")
	}
	dir := t.TempDir()
	conf := nginxConf{Dir: dir, ErrorLog: filepath.Join(dir, "error.log"), Listen: "127.0.0.1:1",
		Upstream: "127.0.0.1:2", Workers: 1, User: nginxUser()}
	text, err := conf.render()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-e", conf.ErrorLog, "-p", dir+"/", "-c", path).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}

// TestNginxProxies starts nginx as the bench does, in front of a test
// upstream: a large body passes, an SSE stream's first event arrives before
// the upstream has sent the last (nothing buffers it), the workers count in
// the CPU figures, and stopping leaves no process behind.
func TestNginxProxies(t *testing.T) {
	bin := nginxBinary()
	if bin == "" {
		t.Skip("nginx is not installed")
	}
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sse" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: ping\ndata: {}\n\n")
			w.(http.Flusher).Flush()
			<-release
			fmt.Fprint(w, "event: message_stop\ndata: {}\n\n")
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	}))
	defer up.Close()
	dir := t.TempDir()
	c, err := startNginx(dir, "nginx", bin, strings.TrimPrefix(up.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()

	body := bytes.Repeat([]byte("x"), 3<<20/2)
	resp, err := http.Post(c.url()+"/v1/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != fmt.Sprint(len(body)) {
		t.Fatalf("large body: %s %q", resp.Status, got)
	}

	resp, err = http.Get(c.url() + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("event: ping"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "event: ping" {
		t.Fatalf("first event: %q, %v", first, err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(rest), "message_stop") {
		t.Fatalf("stream end: %q", rest)
	}

	if n := len(c.pids()); n != 1+nginxWorkers() {
		t.Errorf("pids: %d processes, want the master and %d workers", n, nginxWorkers())
	}
	if c.hwm() <= 0 {
		t.Error("no peak RSS")
	}
	c.stop()
	if err := syscall.Kill(-c.pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("nginx's process group is still there after stop (kill: %v)", err)
	}
}

// TestWaitNginxAddrInUse: a port taken between freePort and nginx's bind
// is told apart from other start failures (startNginx retries it).
func TestWaitNginxAddrInUse(t *testing.T) {
	dir := t.TempDir()
	c := &child{name: "nginx", errPath: filepath.Join(dir, "e"), flush: func() {}}
	os.WriteFile(c.errPath, []byte(`nginx: [emerg] bind() to 127.0.0.1:4000 failed (98: Address already in use)`), 0o644)
	exited := make(chan struct{})
	close(exited)
	if err := waitNginx(c, filepath.Join(dir, "pid"), exited); !errors.Is(err, errAddrInUse) {
		t.Fatalf("waitNginx = %v, want errAddrInUse", err)
	}
	os.WriteFile(c.errPath, []byte(`nginx: [emerg] unknown directive "x"`), 0o644)
	if err := waitNginx(c, filepath.Join(dir, "pid"), exited); err == nil || errors.Is(err, errAddrInUse) {
		t.Fatalf("waitNginx = %v, want a start error", err)
	}
}

// TestPrepareWithoutNginx: row N is dropped with one line for the report,
// and the other rows run.
func TestPrepareWithoutNginx(t *testing.T) {
	t.Setenv("CTXPROXY_BENCH_NGINX", filepath.Join(t.TempDir(), "no-nginx"))
	r := &runner{}
	rows, err := r.prepare(pick(allRows, "2p,N,4"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, row := range rows {
		ids = append(ids, row.id)
	}
	if got := strings.Join(ids, ","); got != "2p,4" {
		t.Errorf("rows = %s, want 2p,4", got)
	}
	if len(r.skipped) != 1 || !strings.Contains(r.skipped[0], "nginx is not installed") {
		t.Errorf("skipped = %q", r.skipped)
	}
}
