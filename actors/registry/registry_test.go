package registry_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors/registry"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

func openStore(t testing.TB, dir string) persistence.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func request(name string) gateway.RegisterRequest {
	return gateway.RegisterRequest{Name: name, TransportType: persistence.TransportHTTP,
		ConnectionConfig: []byte(`{"url":"http://127.0.0.1:1/mcp"}`)}
}

func TestNewServerDefaults(t *testing.T) {
	off := false
	tests := []struct {
		name        string
		req         gateway.RegisterRequest
		wantPinning bool
		wantPinNew  string
	}{
		{name: "defaults", req: request("a"), wantPinning: true, wantPinNew: persistence.PinNewServe},
		{name: "pinning off", req: gateway.RegisterRequest{Name: "b", Pinning: &off, PinNewTools: persistence.PinNewWithhold}, wantPinNew: persistence.PinNewWithhold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := registry.NewServer(tt.req)
			if s.Status != persistence.StatusDisconnected || s.Policy.Pinning != tt.wantPinning || s.Policy.PinNewTools != tt.wantPinNew {
				t.Fatalf("NewServer = status %s pinning %v pin-new %s", s.Status, s.Policy.Pinning, s.Policy.PinNewTools)
			}
		})
	}
}

func TestWriterCreateUpdateDelete(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	w := &registry.Writer{Store: st, MaxServers: 1}
	srv, replayed, err := w.Create(ctx, request("one"), nil)
	if err != nil || replayed || srv.ID == "" {
		t.Fatalf("Create = %+v, %v, %v", srv, replayed, err)
	}
	if _, _, err := w.Create(ctx, request("two"), nil); !errors.Is(err, gateway.ErrMaxServers) {
		t.Fatalf("Create beyond MaxServers = %v, want ErrMaxServers", err)
	}
	desc := "changed"
	old, updated, err := w.Update(ctx, srv.ID, persistence.ServerPatch{Description: &desc})
	if err != nil || old.Description != nil && *old.Description == desc || updated.Description == nil || *updated.Description != desc {
		t.Fatalf("Update = old %v new %v, %v", old.Description, updated.Description, err)
	}
	var deactivated []string
	name, err := w.Delete(ctx, srv.ID, func(_ context.Context, id string) error {
		deactivated = append(deactivated, id)
		return errors.New("no answer")
	}, func(error) {})
	if err != nil || name != "one" || len(deactivated) != 1 {
		t.Fatalf("Delete = %q, %v (deactivated %v)", name, err, deactivated)
	}
	if _, err := w.Delete(ctx, srv.ID, nil, nil); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Delete again = %v, want ErrNotFound before any deactivation", err)
	}
}

func TestWriterCreateKeyedReplays(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	w := &registry.Writer{Store: st}
	key := persistence.IdempotencyKey{Scope: "admin", Key: "k1", Fingerprint: "f", Retention: time.Hour}
	first, _, err := w.Create(ctx, request("keyed"), &key)
	if err != nil {
		t.Fatal(err)
	}
	again, replayed, err := w.Create(ctx, request("keyed"), &key)
	if err != nil || !replayed || again.ID != first.ID {
		t.Fatalf("second keyed Create = %s, replayed %v, %v; want %s replayed", again.ID, replayed, err, first.ID)
	}
}

func TestCheckExposedName(t *testing.T) {
	servers := map[string]routing.ServerEntry{"id-a": {ID: "id-a", Name: "a", Status: persistence.StatusConnected}}
	tools := map[string][]persistence.Tool{"id-a": {{ID: 1, Name: "a.read", OriginalName: "read", SourceServerID: "id-a"}}}
	rt := routing.BuildRouteTable(servers, tools, "__", 1, nil, nil, nil)
	alias := rt.ToolsIn(nil)[0].Alias
	tests := []struct {
		name, server, original, exposed string
		taken                           bool
	}{
		{name: "a meta-tool's name", server: "id-b", original: "x", exposed: "search_aggregated_tools", taken: true},
		{name: "another tool's alias", server: "id-b", original: "x", exposed: alias, taken: true},
		{name: "the tool's own alias", server: "id-a", original: "read", exposed: alias},
		{name: "a free name", server: "id-b", original: "x", exposed: "brand_new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := registry.CheckExposedName(rt, tt.server, tt.original, tt.exposed)
			if errors.Is(err, gateway.ErrNameTaken) != tt.taken {
				t.Fatalf("CheckExposedName(%q) = %v, want taken %v", tt.exposed, err, tt.taken)
			}
		})
	}
}

func TestCuratorAnnouncesAndRefuses(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	srv, _, err := (&registry.Writer{Store: st}).Create(ctx, request("files"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var announced, profiles int
	c := &registry.Curator{Store: st, Routes: func() *routing.RouteTable { return routing.BuildRouteTable(nil, nil, "__", 0, nil, nil, nil) },
		ServerChanged: func(context.Context, persistence.Server) { announced++ }, ProfilesChanged: func(context.Context) { profiles++ }}
	meta := "list_mcp_servers"
	if _, err := c.PutToolOverride(ctx, persistence.ToolOverride{ServerID: srv.ID, OriginalName: "read", ExposedName: &meta}); !errors.Is(err, gateway.ErrNameTaken) {
		t.Fatalf("override to a meta-tool's name = %v, want ErrNameTaken", err)
	}
	name := "reader"
	if _, err := c.PutToolOverride(ctx, persistence.ToolOverride{ServerID: srv.ID, OriginalName: "read", ExposedName: &name}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutToolOverride(ctx, persistence.ToolOverride{ServerID: srv.ID, OriginalName: "write", ExposedName: &name}); !errors.Is(err, gateway.ErrNameTaken) {
		t.Fatalf("a second override with the same name = %v, want ErrNameTaken", err)
	}
	if err := c.DeleteToolOverride(ctx, srv.ID, "read"); err != nil {
		t.Fatal(err)
	}
	if announced != 2 {
		t.Fatalf("announced %d server changes, want 2 (refused writes announce nothing)", announced)
	}
	if _, _, err := c.PutProfile(ctx, persistence.Profile{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteProfile(ctx, "p"); err != nil || profiles != 2 {
		t.Fatalf("DeleteProfile = %v, profile announcements %d, want 2", err, profiles)
	}
}

func TestBaselineSkipsUnhashableDefinitions(t *testing.T) {
	now := time.Now()
	pins := registry.Baseline("s", []persistence.Tool{{OriginalName: "ok", Definition: []byte(`{"name":"ok"}`)}, {OriginalName: "bad", Definition: []byte(`{`)}}, now)
	if len(pins) != 1 || pins[0].OriginalName != "ok" || pins[0].ApprovedAt == nil || !pins[0].ApprovedAt.Equal(now) {
		t.Fatalf("Baseline = %+v, want the one hashable tool approved at now", pins)
	}
}

// A Writer carries out a registration in the store; the registry actor runs it off its mailbox and announces it.
func ExampleWriter() {
	dir, _ := os.MkdirTemp("", "registry-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "store.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	w := &registry.Writer{Store: st, MaxServers: 50}
	srv, replayed, err := w.Create(context.Background(), gateway.RegisterRequest{Name: "weather", TransportType: persistence.TransportHTTP,
		ConnectionConfig: []byte(`{"url":"http://127.0.0.1:1/mcp"}`)}, nil)
	fmt.Println(srv.Name, srv.Status, srv.Policy.Pinning, replayed, err)
	// Output: weather DISCONNECTED true false <nil>
}
