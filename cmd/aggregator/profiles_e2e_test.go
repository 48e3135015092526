package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/routing"
)

const (
	profAdmin = "admin-secret-token-prof1"
	profBot   = "bot-client-token-prof01"
	profFree  = "free-client-token-prof1"
)

// toolBackend is an in-process go-sdk streamable HTTP server with the named tools (more can be added later).
func toolBackend(t *testing.T, names ...string) (*mcp.Server, string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "prof", Version: "1"}, nil)
	for _, n := range names {
		addEchoTool(srv, n)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

func addEchoTool(srv *mcp.Server, name string) {
	srv.AddTool(&mcp.Tool{Name: name, Description: "tool " + name, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
}

func (d *daemon) doAs(token, method, path string, body any) (int, map[string]any) {
	d.t.Helper()
	var r *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	} else {
		r = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, d.base+path, r)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// backendTools lists the names of the non-meta tools a session sees.
func backendTools(t *testing.T, s *mcp.ClientSession) []string {
	t.Helper()
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range res.Tools {
		if !routing.IsMetaToolName(tl.Name) {
			out = append(out, tl.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestProfilesOnTheMCPEndpoint: the real daemon serves each profile at /mcp/profiles/{name} with only its tools; a
// client token bound to a profile sees only it on /mcp and is refused another profile's endpoint; an unknown
// profile is 404; on /mcp/servers/{name} it reaches only its profile's servers and tools; notifications/tools/list_changed reaches only the clients of the profile whose tool set changed;
// `aggregator stdio --profile NAME` (relaying to the running daemon) lists only that profile's tools.
func TestProfilesOnTheMCPEndpoint(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+profAdmin, "MCP_AGGREGATOR_CLIENT_TOKENS=bot:"+profBot+",free:"+profFree)
	d.start()
	_, urlA := toolBackend(t, "alpha_read", "alpha_write")
	backB, urlB := toolBackend(t, "beta_x")
	for name, url := range map[string]string{"a": urlA, "b": urlB} {
		if code, body := d.doAs(profAdmin, "POST", "/servers", map[string]any{"name": name, "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": url}, "auto_connect": true}); code != http.StatusCreated {
			t.Fatalf("register %s: %d %v", name, code, body)
		}
	}
	for name, body := range map[string]any{
		"readers": map[string]any{"selectors": []any{map[string]any{"server": "a", "tools": []string{"*_read"}}}, "clients": []string{"bot"}},
		"bees":    map[string]any{"selectors": []any{map[string]any{"server": "b"}}},
	} {
		if code, out := d.doAs(profAdmin, "PUT", "/profiles/"+name, body); code != http.StatusCreated {
			t.Fatalf("profile %s: %d %v", name, code, out)
		}
	}
	connect := func(path, token string, changed *atomic.Int32) (*mcp.ClientSession, error) {
		opts := &mcp.ClientOptions{}
		if changed != nil {
			opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { changed.Add(1) }
		}
		cl := mcp.NewClient(&mcp.Implementation{Name: "prof-e2e", Version: "1"}, opts)
		return cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.mcp + path,
			HTTPClient: &http.Client{Transport: bearerRT{token}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	}
	waitList := func(s *mcp.ClientSession, want []string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := backendTools(t, s)
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("tools %v, want %v", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var readersChanged, beesChanged atomic.Int32
	readers, err := connect("/mcp/profiles/readers", profFree, &readersChanged)
	if err != nil {
		t.Fatal(err)
	}
	defer readers.Close()
	waitList(readers, []string{"a__alpha_read"})
	bees, err := connect("/mcp/profiles/bees", profFree, &beesChanged)
	if err != nil {
		t.Fatal(err)
	}
	defer bees.Close()
	waitList(bees, []string{"b__beta_x"})
	bot, err := connect("/mcp", profBot, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	waitList(bot, []string{"a__alpha_read"})
	if res, err := bot.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__alpha_read"}); err != nil || res.IsError {
		t.Fatalf("bound client calls its tool: %v %+v", err, res)
	}
	if res, err := bot.CallTool(context.Background(), &mcp.CallToolParams{Name: "a.alpha_write"}); err == nil && !res.IsError {
		t.Fatal("a bound client called a tool outside its profile")
	}
	if _, err := connect("/mcp/profiles/bees", profBot, nil); err == nil {
		t.Fatal("a bound client opened another profile's endpoint")
	}
	if code := status(t, "POST", d.mcp+"/mcp/profiles/nope", profFree); code != http.StatusNotFound {
		t.Fatalf("unknown profile: %d", code)
	}
	if code := status(t, "POST", d.mcp+"/mcp/profiles/bees", profBot); code != http.StatusForbidden {
		t.Fatalf("bound client on another profile: %d", code)
	}
	// The per-server endpoint: the bound client reaches its profile's server with its profile's tools only, and no
	// other server (issue 24).
	if code := status(t, "POST", d.mcp+"/mcp/servers/b", profBot); code != http.StatusForbidden {
		t.Fatalf("bound client on /mcp/servers/b outside its profile: %d", code)
	}
	botA, err := connect("/mcp/servers/a", profBot, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer botA.Close()
	waitList(botA, []string{"alpha_read"})
	if res, err := botA.CallTool(context.Background(), &mcp.CallToolParams{Name: "alpha_write"}); err == nil && !res.IsError {
		t.Fatal("a bound client called a tool outside its profile on /mcp/servers/a")
	}

	// A change of b's tools reaches the bees clients only.
	time.Sleep(time.Second) // let notifications of the set-up settle
	readersChanged.Store(0)
	beesChanged.Store(0)
	addEchoTool(backB, "beta_y")
	waitList(bees, []string{"b__beta_x", "b__beta_y"})
	time.Sleep(time.Second)
	if beesChanged.Load() == 0 {
		t.Fatal("the bees client was not told its tool list changed")
	}
	if n := readersChanged.Load(); n != 0 {
		t.Fatalf("the readers client was told %d times of a change outside its profile", n)
	}

	// stdio --profile relays to this daemon's profile endpoint.
	cmd := exec.Command(binary, "stdio", "--profile", "readers")
	cmd.Env = d.env
	var stderr syncBuf
	cmd.Stderr = &stderr
	cl := mcp.NewClient(&mcp.Implementation{Name: "stdio-prof", Version: "1"}, nil)
	sess, err := cl.Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second},
		&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatalf("stdio --profile: %v\n%s", err, stderr.String())
	}
	defer sess.Close()
	waitList(sess, []string{"a__alpha_read"})
	if !strings.Contains(stderr.String(), "mode: relay") {
		t.Errorf("stdio did not relay:\n%s", stderr.String())
	}
	if code := run([]string{"serve", "--profile", "x"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("--profile outside stdio: exit %d", code)
	}
}
