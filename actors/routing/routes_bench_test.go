package routing

import (
	"fmt"
	"testing"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/persistence"
)

// benchTable is a routing table of 100 servers x 100 tools, with or without curation (an override on every tenth
// tool, three profiles).
func benchTable(curated bool) (map[string]ServerEntry, map[string][]persistence.Tool, *Curation) {
	servers := map[string]ServerEntry{}
	tools := map[string][]persistence.Tool{}
	rc := &Curation{Servers: map[string]*ServerCuration{}}
	id := int64(0)
	for s := 0; s < 100; s++ {
		sid := fmt.Sprintf("s%03d", s)
		name := fmt.Sprintf("srv%03d", s)
		servers[sid] = ServerEntry{ID: sid, Name: name, Status: persistence.StatusConnected}
		var ovs []persistence.ToolOverride
		for k := 0; k < 100; k++ {
			id++
			orig := fmt.Sprintf("tool_%03d", k)
			tools[sid] = append(tools[sid], persistence.Tool{ID: id, Name: name + "." + orig, OriginalName: orig, SourceServerID: sid,
				Description: "does " + orig, InputSchema: []byte(`{"type":"object"}`), SkillIDs: []string{"skill-" + fmt.Sprint(k%7)}})
			if curated && k%10 == 0 {
				x := fmt.Sprintf("x_%s_%s", name, orig)
				ovs = append(ovs, persistence.ToolOverride{ServerID: sid, OriginalName: orig, ExposedName: &x})
			}
		}
		rc.Servers[sid] = &ServerCuration{overrides: curation.NewOverrides(ovs)}
	}
	if curated {
		rc.Profiles = []persistence.Profile{
			{Name: "one-server", Selectors: []persistence.ProfileSelector{{Server: "srv007"}}},
			{Name: "pattern", Selectors: []persistence.ProfileSelector{{Tools: []string{"tool_00*"}}}},
			{Name: "skill", Selectors: []persistence.ProfileSelector{{Skills: []string{"skill-3"}}}},
		}
	} else {
		rc = nil
	}
	return servers, tools, rc
}

// BenchmarkRouteTableBuild10k: building the table of 10,000 tools (on every change), plain and with curation.
func BenchmarkRouteTableBuild10k(b *testing.B) {
	for _, curated := range []bool{false, true} {
		b.Run(fmt.Sprintf("curated=%v", curated), func(b *testing.B) {
			servers, tools, rc := benchTable(curated)
			prev := buildRouteTable(servers, tools, "__", 1, nil, rc)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				prev = buildRouteTable(servers, tools, "__", uint64(i+2), prev, rc)
			}
		})
	}
}

// BenchmarkResolve10k: resolving a call's name on the call path, without a scope (every caller today), and within
// a profile.
func BenchmarkResolve10k(b *testing.B) {
	servers, tools, rc := benchTable(true)
	rt := buildRouteTable(servers, tools, "__", 1, nil, rc)
	cases := []struct {
		name  string
		scope Scope
		tool  string
	}{
		{"namespaced", nil, "srv042.tool_042"},
		{"alias", nil, "srv042__tool_042"},
		{"exposed", nil, "x_srv042_tool_040"},
		{"profile", Scope{"skill"}, "srv042.tool_003"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := rt.ResolveIn(c.scope, c.tool, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
