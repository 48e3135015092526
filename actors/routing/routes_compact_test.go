package routing

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/mcpgw/aggregator/persistence"
)

// TestCompactToolsKeepsEveryField checks that compacting a server's rows changes no field's value, shares what
// tools have in common, and leaves no JSON part able to overwrite another.
func TestCompactToolsKeepsEveryField(t *testing.T) {
	primary := "web"
	changed := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	var rows []persistence.Tool
	for i := range 5 {
		tl := persistence.Tool{
			ID: int64(i + 1), Name: fmt.Sprintf("srv.tool_%d", i), OriginalName: fmt.Sprintf("tool_%d", i),
			Description:    fmt.Sprintf("Does thing %d", i),
			InputSchema:    json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"p%d":{"type":"string"}}}`, i)),
			SourceServerID: fmt.Sprint("server-", 1), // equal, not the same string
			IsClassified:   i%2 == 0, ClassificationState: fmt.Sprint("CLASSI", "FIED"),
			SkillIDs: []string{"web", fmt.Sprint("util", "ities")}, DefinitionHash: fmt.Sprintf("%064d", i),
			DiscoveredAt: changed.Add(-time.Hour), UpdatedAt: changed,
		}
		switch i {
		case 1:
			tl.Definition = json.RawMessage(`{"annotations":{"readOnlyHint":true}}`)
			tl.PrimarySkillID = &primary
			c := changed
			tl.ChangedAt = &c
		case 2:
			tl.OriginalName = "other" // not the namespaced name's suffix
			tl.SkillIDs = []string{}
		case 3:
			tl.InputSchema = nil
			tl.SkillIDs = nil
		}
		rows = append(rows, tl)
	}
	want := make([]persistence.Tool, len(rows))
	for i, r := range rows {
		want[i] = r
		want[i].InputSchema = append(json.RawMessage(nil), r.InputSchema...)
		if r.InputSchema == nil {
			want[i].InputSchema = nil
		}
		want[i].SourceServerID = "server-1"
	}
	got := CompactTools("server-1", rows, nil)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("compacted rows differ:\n got %+v\nwant %+v", got, want)
	}
	if &got[0] == &rows[0] {
		t.Fatal("the rows were not copied into a slice of their own")
	}
	if unsafe.StringData(got[0].SkillIDs[0]) != unsafe.StringData(got[4].SkillIDs[0]) || &got[0].SkillIDs[0] != &got[4].SkillIDs[0] {
		t.Error("equal skill lists are not shared")
	}
	if unsafe.StringData(got[0].ClassificationState) != unsafe.StringData(got[4].ClassificationState) {
		t.Error("equal classification states are not shared")
	}
	if unsafe.StringData(got[0].OriginalName) != unsafe.StringData(got[0].Name[len("srv."):]) {
		t.Error("the original name is not the namespaced name's suffix")
	}
	grown := append(got[0].InputSchema, "garbage"...)
	if string(got[1].InputSchema) != string(want[1].InputSchema) || len(grown) != len(want[0].InputSchema)+7 {
		t.Fatal("appending to one tool's schema overwrote the next tool's")
	}
}

// TestCompactToolsKeepsUnchangedText checks that a reload keeps the text of unchanged tools where it was (the MCP
// endpoint holds it) and gives a changed tool text of its own.
func TestCompactToolsKeepsUnchangedText(t *testing.T) {
	row := func(id int64, desc string) persistence.Tool {
		return persistence.Tool{ID: id, Name: fmt.Sprintf("srv.t%d", id), OriginalName: fmt.Sprintf("t%d", id), Description: desc,
			InputSchema: json.RawMessage(`{"type":"object"}`), DefinitionHash: fmt.Sprint("hash-", desc), SkillIDs: []string{}}
	}
	first := CompactTools("s", []persistence.Tool{row(1, "one"), row(2, "two")}, nil)
	reload := []persistence.Tool{row(1, "one"), row(2, "two, changed")}
	reload[0].IsClassified, reload[0].SkillIDs = true, []string{"web"} // classification alone changes no text
	second := CompactTools("s", reload, first)
	if unsafe.StringData(second[0].Description) != unsafe.StringData(first[0].Description) ||
		&second[0].InputSchema[0] != &first[0].InputSchema[0] || unsafe.StringData(second[0].Name) != unsafe.StringData(first[0].Name) {
		t.Error("an unchanged tool's text was copied again")
	}
	if !second[0].IsClassified || len(second[0].SkillIDs) != 1 {
		t.Errorf("the reloaded row's classification was lost: %+v", second[0])
	}
	if second[1].Description != "two, changed" || unsafe.StringData(second[1].Name) == unsafe.StringData(first[1].Name) {
		t.Errorf("a changed tool kept its old text: %q", second[1].Description)
	}
}
