// Package crosslang is the cross-language test of the Go client library: the library sends every
// message type to a real collector binary, a real deliverer binary forwards them, and a receiver
// in this test checks each webhook body and its X-Signature.
//
// It needs the built binaries: HOOKRELAY_BIN_DIR is Bazel's bazel-bin directory (tools/test.sh
// sets it after `bazel test //...`). Without it the test is skipped.
package crosslang

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	analytics "github.com/hookrelay/hookrelay/clients/go"
)

const (
	writeKey = "wk_crosslang"
	secret   = "crosslang-secret"
)

// process is a service binary whose stdout (JSON log lines) is scanned for a line.
type process struct {
	cmd   *exec.Cmd
	lines chan map[string]interface{}
}

func start(t *testing.T, name string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{cmd: cmd, lines: make(chan map[string]interface{}, 1024)}
	go func() {
		scanner := bufio.NewScanner(out)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		for scanner.Scan() {
			t.Logf("[%s] %s", filepath.Base(name), scanner.Text())
			var line map[string]interface{}
			if json.Unmarshal(scanner.Bytes(), &line) == nil {
				select {
				case p.lines <- line:
				default:
				}
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s did not exit cleanly after SIGTERM: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("%s did not exit within 30 s of SIGTERM", name)
		}
	})
	return p
}

// waitFor returns the first log line whose "msg" is msg.
func (p *process) waitFor(t *testing.T, msg string) map[string]interface{} {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("process exited before logging %q", msg)
			}
			if line["msg"] == msg {
				return line
			}
		case <-deadline:
			t.Fatalf("no %q log line within 60 s", msg)
		}
	}
}

type received struct {
	body      []byte
	signature string
}

func TestLibraryToCollectorToDelivererToReceiver(t *testing.T) {
	binDir := os.Getenv("HOOKRELAY_BIN_DIR")
	if binDir == "" {
		t.Skip("HOOKRELAY_BIN_DIR (bazel-bin with //collector:collector and //deliverer:deliverer) is not set; tools/test.sh sets it")
	}

	var mu sync.Mutex
	var got []received
	arrived := make(chan struct{}, 64)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, received{body: body, signature: r.Header.Get("X-Signature")})
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
		arrived <- struct{}{}
	}))
	defer receiver.Close()

	dir := t.TempDir()
	config := fmt.Sprintf(`sources:
  - id: go
    name: Go services
    kind: server
    write_keys: [%s]
destinations:
  - id: go-hook
    type: webhooks
    sources: [go]
    enabled: true
    shared_secret: %s
    urls:
      - url: %s/hooks
`, writeKey, secret, receiver.URL)
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	collector := start(t, filepath.Join(binDir, "collector/collector"),
		"--config="+configPath, "--data_dir="+filepath.Join(dir, "data"),
		"--grpc_address=127.0.0.1:0", "--http_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
		"--admin_http_address=127.0.0.1:0")
	serving := collector.waitFor(t, "collector serving")
	httpPort := int(serving["http_port"].(float64))
	grpcPort := int(serving["grpc_port"].(float64))

	deliverer := start(t, filepath.Join(binDir, "deliverer/deliverer"),
		fmt.Sprintf("--collector=127.0.0.1:%d", grpcPort), "--metrics_address=127.0.0.1:0",
		"--allow_private_networks")
	deliverer.waitFor(t, "deliverer running")

	client := analytics.New(writeKey)
	client.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	calls := []error{
		client.Track(&analytics.Track{UserId: "u1", Event: "Order Completed",
			Properties: map[string]interface{}{"total": 19.5, "items": 2}, Message: analytics.Message{MessageId: "go-track"}}),
		client.Identify(&analytics.Identify{UserId: "u1",
			Traits: map[string]interface{}{"email": "u1@example.com"}, Message: analytics.Message{MessageId: "go-identify"}}),
		client.Page(&analytics.Page{UserId: "u1", Name: "Home",
			Traits: map[string]interface{}{"path": "/"}, Message: analytics.Message{MessageId: "go-page"}}),
		client.Screen(&analytics.Screen{UserId: "u1", Name: "Cart", Message: analytics.Message{MessageId: "go-screen"}}),
		client.Group(&analytics.Group{UserId: "u1", GroupId: "g1",
			Traits: map[string]interface{}{"Company Name": "Initech"}, Message: analytics.Message{MessageId: "go-group"}}),
		client.Alias(&analytics.Alias{UserId: "u1", PreviousId: "anon-1", Message: analytics.Message{MessageId: "go-alias"}}),
	}
	for i, err := range calls {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := client.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	timeout := time.After(60 * time.Second)
	for n := 0; n < len(calls); n++ {
		select {
		case <-arrived:
		case <-timeout:
			t.Fatalf("only %d of %d webhooks arrived within 60 s", n, len(calls))
		}
	}

	mu.Lock()
	defer mu.Unlock()
	byID := map[string]map[string]interface{}{}
	for _, r := range got {
		mac := hmac.New(sha1.New, []byte(secret))
		mac.Write(r.body)
		if want := hex.EncodeToString(mac.Sum(nil)); r.signature != want {
			t.Errorf("X-Signature %q, want %q for body %s", r.signature, want, r.body)
		}
		var body map[string]interface{}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("webhook body is not JSON: %s", r.body)
		}
		byID[fmt.Sprint(body["messageId"])] = body
	}
	want := map[string]string{"go-track": "track", "go-identify": "identify", "go-page": "page",
		"go-screen": "screen", "go-group": "group", "go-alias": "alias"}
	for id, typ := range want {
		body, ok := byID[id]
		if !ok {
			t.Errorf("no webhook for %s", id)
			continue
		}
		if body["type"] != typ || body["version"] != float64(1) || body["userId"] != "u1" {
			t.Errorf("%s: body %v", id, body)
		}
	}
	if p := byID["go-track"]["properties"].(map[string]interface{}); p["total"] != 19.5 || p["items"] != float64(2) {
		t.Errorf("track properties %v", p)
	}
	if p := byID["go-page"]["properties"].(map[string]interface{}); p["path"] != "/" {
		t.Errorf("page Traits must go out as properties: %v", byID["go-page"])
	}
	if tr := byID["go-group"]["traits"].(map[string]interface{}); tr["Company Name"] != "Initech" {
		t.Errorf("group traits %v", tr)
	}
	if a := byID["go-alias"]; a["previousId"] != "anon-1" || a["Previous ID"] != "anon-1" || a["User ID"] != "u1" {
		t.Errorf("alias body %v", a)
	}
}
