package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

func ptr[T any](v T) *T { return &v }

// stdioConfig is a typical STDIO connection config with an unresolved ${VAR} reference.
const stdioConfig = `{"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}}`

// newServer returns a minimal valid server named name.
func newServer(name string) *persistence.Server {
	return &persistence.Server{
		Name:             name,
		TransportType:    persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(stdioConfig),
	}
}

// mustCreate creates a minimal server named name and returns it as stored.
func mustCreate(t *testing.T, s persistence.Store, name string) persistence.Server {
	t.Helper()
	srv := newServer(name)
	if err := s.CreateServer(t.Context(), srv, 0); err != nil {
		t.Fatalf("CreateServer(%q): %v", name, err)
	}
	return *srv
}

func mustGet(t *testing.T, s persistence.Store, id string) persistence.Server {
	t.Helper()
	v, err := s.GetServer(t.Context(), id)
	if err != nil {
		t.Fatalf("GetServer(%q): %v", id, err)
	}
	return v
}

// mustReplace replaces the tools of server id and returns the diff.
func mustReplace(t *testing.T, s persistence.Store, id string, defs []persistence.ToolDef) persistence.ToolDiff {
	t.Helper()
	d, err := s.ReplaceServerTools(t.Context(), id, defs, nil)
	if err != nil {
		t.Fatalf("ReplaceServerTools(%q, %d defs): %v", id, len(defs), err)
	}
	return d
}

// mustTools lists every tool of server id (all servers when empty), by name.
func mustTools(t *testing.T, s persistence.Store, id string) []persistence.Tool {
	t.Helper()
	tools, total, err := s.ListTools(t.Context(), persistence.ListToolsFilter{ServerID: id})
	if err != nil {
		t.Fatalf("ListTools(%q): %v", id, err)
	}
	if total != len(tools) {
		t.Fatalf("ListTools(%q) without limit: total %d, %d tools", id, total, len(tools))
	}
	return tools
}

func toolsByName(tools []persistence.Tool) map[string]persistence.Tool {
	m := make(map[string]persistence.Tool, len(tools))
	for _, tl := range tools {
		m[tl.Name] = tl
	}
	return m
}

func toolNames(tools []persistence.Tool) []string {
	out := make([]string, 0, len(tools))
	for _, tl := range tools {
		out = append(out, tl.Name)
	}
	return out
}

func serverNames(servers []persistence.Server) []string {
	out := make([]string, 0, len(servers))
	for _, v := range servers {
		out = append(out, v.Name)
	}
	return out
}

func toolDef(name, description, schema string) persistence.ToolDef {
	d := persistence.ToolDef{OriginalName: name, Description: description}
	if schema != "" {
		d.InputSchema = json.RawMessage(schema)
	}
	return d
}

// jsonEqual reports whether a and b encode the same JSON value (PostgreSQL's JSONB reorders keys and spaces).
func jsonEqual(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// sameStrings compares string slices, treating nil and empty alike.
func sameStrings(a, b []string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func dump(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// storedTime is what a store gives back for a time it was given: UTC, microseconds.
func storedTime(tm time.Time) time.Time { return tm.UTC().Truncate(time.Microsecond) }

func normTime(tm time.Time) time.Time { return tm.Round(0).UTC() }

func normTimePtr(tm *time.Time) *time.Time {
	if tm == nil {
		return nil
	}
	n := normTime(*tm)
	return &n
}

// requireUTC fails when a time the store returned is not in UTC or carries more than microsecond precision.
func requireUTC(t *testing.T, what string, times ...*time.Time) {
	t.Helper()
	for _, tm := range times {
		if tm == nil {
			continue
		}
		if tm.Location() != time.UTC {
			t.Errorf("%s: time %v is in %v, want UTC", what, *tm, tm.Location())
		}
		if !tm.Equal(tm.Truncate(time.Microsecond)) {
			t.Errorf("%s: time %v has sub-microsecond precision", what, *tm)
		}
	}
}

// equalServer fails unless got is want: JSON compared by value, times by instant, and got's times in UTC.
func equalServer(t *testing.T, want, got persistence.Server) {
	t.Helper()
	requireUTC(t, "server "+got.Name, &got.RegisteredAt, &got.UpdatedAt, got.LastHealthCheck, got.ConnectedAt)
	if !jsonEqual(want.ConnectionConfig, got.ConnectionConfig) {
		t.Errorf("server %s: connection config %s, want %s", want.Name, got.ConnectionConfig, want.ConnectionConfig)
	}
	norm := func(v persistence.Server) persistence.Server {
		v.ConnectionConfig = nil
		v.RegisteredAt, v.UpdatedAt = normTime(v.RegisteredAt), normTime(v.UpdatedAt)
		v.LastHealthCheck, v.ConnectedAt = normTimePtr(v.LastHealthCheck), normTimePtr(v.ConnectedAt)
		return v
	}
	if w, g := norm(want), norm(got); !reflect.DeepEqual(w, g) {
		t.Errorf("server mismatch\n got %s\nwant %s", dump(g), dump(w))
	}
}

// equalTool fails unless got is want, comparing like equalServer.
func equalTool(t *testing.T, want, got persistence.Tool) {
	t.Helper()
	requireUTC(t, "tool "+got.Name, &got.DiscoveredAt, &got.UpdatedAt, got.ChangedAt)
	if !jsonEqual(want.InputSchema, got.InputSchema) {
		t.Errorf("tool %s: input schema %s, want %s", want.Name, got.InputSchema, want.InputSchema)
	}
	if !jsonEqual(want.Definition, got.Definition) {
		t.Errorf("tool %s: definition %s, want %s", want.Name, got.Definition, want.Definition)
	}
	norm := func(v persistence.Tool) persistence.Tool {
		v.InputSchema, v.Definition = nil, nil
		v.DiscoveredAt, v.UpdatedAt, v.ChangedAt = normTime(v.DiscoveredAt), normTime(v.UpdatedAt), normTimePtr(v.ChangedAt)
		if len(v.SkillIDs) == 0 {
			v.SkillIDs = nil
		}
		return v
	}
	if w, g := norm(want), norm(got); !reflect.DeepEqual(w, g) {
		t.Errorf("tool mismatch\n got %s\nwant %s", dump(g), dump(w))
	}
}

// requireErrIs fails unless err wraps target.
func requireErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

// between fails unless lo <= tm <= hi.
func between(t *testing.T, what string, tm, lo, hi time.Time) {
	t.Helper()
	if tm.Before(lo) || tm.After(hi) {
		t.Errorf("%s = %v, want between %v and %v", what, tm, lo, hi)
	}
}

// clock returns the current time as a store keeps it, for bounds on store-made timestamps.
func clock() time.Time { return storedTime(time.Now()) }
