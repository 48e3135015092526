package actors_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
)

// catalogue starts an in-process go-sdk server with a few tools that say plainly what they do.
func catalogue(t *testing.T, tools map[string]string) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "catalogue", Version: "1"}, nil)
	for name, desc := range tools {
		addTool(srv, name, desc)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

func search(t *testing.T, sys *actors.System, r actors.SearchRequest) actors.SearchResponse {
	t.Helper()
	if r.Limit == 0 {
		r.Limit = 10
	}
	if r.Strategy == "" {
		r.Strategy = actors.StrategyDirect
	}
	res, err := sys.Search(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func names(res actors.SearchResponse) []string {
	var out []string
	for _, h := range res.Tools {
		out = append(out, h.Tool.Name)
	}
	return out
}

// TestSearchFollowsServers: tools are indexed on discovery, ranked across servers, filtered by server, left out while
// their server is not connected (without being deleted) and back when it is, and gone with their server.
func TestSearchFollowsServers(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	cmd, args := peertest.EverythingStdio(t)
	every := r.register("every", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	weather := r.register("weather", persistence.TransportHTTP, map[string]any{"base_url": catalogue(t, map[string]string{
		"get_forecast":     "Get the weather forecast with temperature and rain for a city",
		"get_air_quality":  "Air quality index and pollution levels of a city",
		"list_alerts":      "Active severe weather alerts for a region",
		"convert_currency": "Convert an amount of money between currencies at today's exchange rate",
	})}, nil, true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res := search(t, r.sys, actors.SearchRequest{Query: "weather forecast for a city", IncludeExternal: true})
		if len(res.Tools) > 0 && res.Tools[0].Tool.Name == "weather.get_forecast" {
			if res.Tools[0].Server.Status != persistence.StatusConnected || res.Tools[0].Score <= 0 || res.Tools[0].Score > 1 {
				t.Fatalf("hit %+v", res.Tools[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("weather.get_forecast never ranked first: %v", names(res))
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("every.get-sum indexed", func() bool {
		res := search(t, r.sys, actors.SearchRequest{Query: "add two numbers", IncludeExternal: true})
		return len(res.Tools) > 0 && res.Tools[0].Tool.Name == "every.get-sum"
	})

	res := search(t, r.sys, actors.SearchRequest{Query: "weather forecast", IncludeExternal: true, ServerFilter: []string{"every"}})
	for _, h := range res.Tools {
		if h.Tool.SourceServerID != every.ID {
			t.Fatalf("server_filter leaked %s", h.Tool.Name)
		}
	}
	if res.ServersSearched != 1 {
		t.Fatalf("servers_searched %d", res.ServersSearched)
	}
	if res := search(t, r.sys, actors.SearchRequest{Query: "weather forecast", IncludeExternal: false}); len(res.Tools) != 0 {
		t.Fatalf("include_external=false returned external tools: %v", names(res))
	}
	if res := search(t, r.sys, actors.SearchRequest{Query: "zzqx vrrp plonk", IncludeExternal: true, ToolThreshold: 0.3}); len(res.Tools) != 0 {
		t.Fatalf("gibberish above the threshold: %v", names(res))
	}

	// BR-007: a disconnected server's tools leave the results but stay stored; they return on reconnect.
	if _, err := r.sys.Disconnect(context.Background(), weather.ID, true); err != nil {
		t.Fatal(err)
	}
	waitFor("weather tools out of results", func() bool {
		for _, n := range names(search(t, r.sys, actors.SearchRequest{Query: "weather forecast for a city", IncludeExternal: true})) {
			if strings.HasPrefix(n, "weather.") {
				return false
			}
		}
		return true
	})
	if c, _ := r.store.CountTools(context.Background(), weather.ID); c.Total != 4 {
		t.Fatalf("tools deleted on disconnect: %d left", c.Total)
	}
	if _, err := r.sys.Connect(context.Background(), weather.ID); err != nil {
		t.Fatal(err)
	}
	waitFor("weather tools back", func() bool {
		n := names(search(t, r.sys, actors.SearchRequest{Query: "weather forecast for a city", IncludeExternal: true}))
		return len(n) > 0 && n[0] == "weather.get_forecast"
	})

	// BR-008: removal takes the tools out of the index.
	if err := r.sys.Remove(context.Background(), weather.ID); err != nil {
		t.Fatal(err)
	}
	waitFor("weather tools gone", func() bool {
		for _, n := range names(search(t, r.sys, actors.SearchRequest{Query: "weather forecast air quality alerts", IncludeExternal: true, Limit: 50})) {
			if strings.HasPrefix(n, "weather.") {
				return false
			}
		}
		return true
	})
}

// TestHierarchicalSearchMatchesSkills: a query matches skills of the taxonomy; without classified tools in them the
// hierarchical strategy falls back to all tools; item_type=skill answers skills only.
func TestHierarchicalSearchMatchesSkills(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	r.register("cat", persistence.TransportHTTP, map[string]any{"base_url": catalogue(t, map[string]string{
		"get_forecast": "Get the weather forecast with temperature and rain for a city",
		"send_email":   "Send an email message to a recipient",
	})}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "cat.get_forecast", hasTool("cat.get_forecast"))
	var res actors.SearchResponse
	deadline := time.Now().Add(15 * time.Second)
	for {
		res = search(t, r.sys, actors.SearchRequest{Query: "weather forecast temperature rain", IncludeExternal: true,
			Strategy: actors.StrategyHierarchical, SkillThreshold: 0.4})
		if len(res.Tools) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(res.MatchedSkills) == 0 || res.MatchedSkills[0].Skill.ID != "weather" {
		t.Fatalf("matched skills %+v, want weather first", res.MatchedSkills)
	}
	if res.StrategyUsed != actors.StrategyHierarchical || len(res.Tools) == 0 || res.Tools[0].Tool.Name != "cat.get_forecast" {
		t.Fatalf("hierarchical: %+v %v", res, names(res))
	}
	skills := search(t, r.sys, actors.SearchRequest{Query: "send an email", IncludeExternal: true, ItemType: "skill", SkillThreshold: 0.4})
	if len(skills.Tools) != 0 || len(skills.MatchedSkills) == 0 || skills.MatchedSkills[0].Skill.ID != "communication" {
		t.Fatalf("item_type=skill: %+v", skills)
	}
	var sk []actors.SkillInfo = r.sys.Skills()
	if len(sk) < 15 || len(sk[0].Embedding) == 0 {
		t.Fatalf("skills: %d, embedding %d", len(sk), len(sk[0].Embedding))
	}
	raw, _ := json.Marshal(sk[0].Skill)
	if !strings.Contains(string(raw), sk[0].ID) {
		t.Fatalf("skill json %s", raw)
	}
}

// TestSkillVectorsFollowTheirTools: once tools are classified into a skill, its embedding moves to the centroid of
// its tools (with its description); when the server is removed, the emptied skill falls back to its description's
// embedding (BR-008); hierarchical search then finds tools within the matched skill.
func TestSkillVectorsFollowTheirTools(t *testing.T) {
	t.Parallel()
	emb := embed.NewHashed(0)
	builtin, err := classify.NewBuiltin(context.Background(), emb, classify.DefaultTaxonomy(),
		func(t classify.Tool) string { return embed.ToolText(t.Name, t.Description, t.InputSchema) })
	if err != nil {
		t.Fatal(err)
	}
	r := newClassifierRig(t, testConfig(), builtin, nil)
	srv := r.register("forecasts", persistence.TransportHTTP, map[string]any{"base_url": catalogue(t, map[string]string{
		"get_forecast":     "Get the weather forecast: temperature, rain, snow and wind for a city",
		"get_air_quality":  "Weather and air quality: pollution, humidity and temperature readings",
		"severe_alerts":    "Severe weather alerts, storms and heat warnings for a region",
		"climate_averages": "Climate data: monthly average temperature and precipitation",
	})}, nil, true)
	tools := waitClassified(t, r, srv.ID, 30*time.Second)
	inWeather := 0
	for _, tl := range tools {
		if slices.Contains(tl.SkillIDs, "weather") {
			inWeather++
		}
	}
	if inWeather == 0 {
		t.Fatalf("no tool classified into weather: %+v", tools)
	}
	space, _ := classify.NewSkillSpace(context.Background(), emb, classify.DefaultTaxonomy())
	desc, _ := space.DescriptionVector("weather")
	skillVec := func() []float32 {
		for _, s := range r.sys.Skills() {
			if s.ID == "weather" {
				return s.Embedding
			}
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for slices.Equal(skillVec(), desc) {
		if time.Now().After(deadline) {
			t.Fatalf("the weather skill's embedding never moved to its tools")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The skill vectors (indexer) and the tools' skills in the routing table (router) follow the same event in two
	// actors: search until both have it.
	req := actors.SearchRequest{Query: "will it rain tomorrow in Paris", IncludeExternal: true,
		Strategy: actors.StrategyHierarchical, SkillThreshold: 0.4}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res := search(t, r.sys, req)
		if !res.Fallback && len(res.Tools) > 0 && slices.Contains(res.Tools[0].Tool.SkillIDs, "weather") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hierarchical search within the weather skill: fallback=%v %v %+v", res.Fallback, names(res), res.MatchedSkills)
		}
	}
	if err := r.sys.Remove(context.Background(), srv.ID); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !slices.Equal(skillVec(), desc) {
		if time.Now().After(deadline) {
			t.Fatalf("the emptied weather skill did not fall back to its description")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
