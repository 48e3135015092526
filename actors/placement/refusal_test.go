package placement

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/errcode"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

func TestRefusal(t *testing.T) {
	srv := Refused{ID: "id-1", Name: "files", Status: "CONNECTED"}
	tests := []struct {
		name     string
		msg      any
		code     string
		holder   string
		wantType string
		wantText string
	}{
		{name: "a call handed over", msg: &pb.CallTool{}, code: errcode.ServerMoved, wantType: "*aggregatorpb.CallToolReply", wantText: "files is being handed over"},
		{name: "a status ask while another process holds it", msg: &pb.GetStatus{}, code: errcode.ServerUnavailable, holder: "node-b",
			wantType: "*aggregatorpb.StatusReply", wantText: "another aggregator process (node-b)"},
		{name: "not found", msg: &pb.Connect{}, code: errcode.ServerNotFound, wantType: "*aggregatorpb.ConnectReply", wantText: "Server not found: id-1"},
		{name: "a reload gets an Ack", msg: &pb.Reload{}, code: errcode.ServerUnavailable, wantType: "*aggregatorpb.Ack", wantText: "does not hold the server's lease"},
		{name: "no typed reply", msg: "local", code: errcode.ServerUnavailable, wantText: "not served by this aggregator process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := srv
			s.Holder = tt.holder
			reply, info := Refusal(tt.msg, tt.code, "", s)
			if got := typeName(reply); got != tt.wantType {
				t.Fatalf("reply %s, want %s", got, tt.wantType)
			}
			if info.Code != tt.code || info.ServerName != "files" || !strings.Contains(info.Message, tt.wantText) {
				t.Fatalf("info = %+v, want code %s and %q", info, tt.code, tt.wantText)
			}
		})
	}
}

func typeName(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf("%T", v)
}

func TestLiveAndUnstash(t *testing.T) {
	now := time.Now()
	stash := []Stashed{
		{Msg: &pb.CallTool{CallId: "past", DeadlineUnixMs: now.Add(-time.Second).UnixMilli()}},
		{Msg: &pb.CallTool{CallId: "future", DeadlineUnixMs: now.Add(time.Minute).UnixMilli()}},
		{Msg: &pb.GetStatus{}},
		{Msg: &pb.CallTool{CallId: "no-deadline"}},
	}
	live := Live(stash, now)
	if len(live) != 3 || live[0].Msg.(*pb.CallTool).CallId != "future" {
		t.Fatalf("Live kept %d, want the 3 still awaited in order", len(live))
	}
	rest, found := Unstash(live, "future")
	if !found || len(rest) != 2 {
		t.Fatalf("Unstash(future) = %d left, found %v", len(rest), found)
	}
	if _, found := Unstash(rest, "gone"); found {
		t.Fatal("Unstash found a call that was never stashed")
	}
}

func TestAdmit(t *testing.T) {
	tests := []struct {
		name     string
		adm      Admission
		msg      any
		verdict  int
		code     string
		fullText string
	}{
		{name: "leaving", adm: Admission{Leaving: errcode.ServerMoved, Owner: true}, msg: &pb.CallTool{}, verdict: Refuse, code: errcode.ServerMoved},
		{name: "owner", adm: Admission{Owner: true}, msg: &pb.CallTool{}, verdict: Serve},
		{name: "a call waits for the first connect", adm: Admission{Owner: true, AwaitConnect: true, Connecting: true}, msg: &pb.CallTool{},
			verdict: Keep, code: errcode.ServerUnavailable, fullText: "wait for the server to connect"},
		{name: "a status ask while connecting", adm: Admission{Owner: true, AwaitConnect: true, Connecting: true}, msg: &pb.GetStatus{}, verdict: Serve},
		{name: "the session's first listing", adm: Admission{Owner: true, Session: true, AwaitConnect: true, Connecting: true}, msg: &pb.ListTools{}, verdict: Serve},
		{name: "activating", adm: Admission{Activating: true}, msg: &pb.Connect{}, verdict: Keep, code: errcode.ServerUnavailable, fullText: "activates"},
		{name: "standing by", adm: Admission{}, msg: &pb.CallTool{}, verdict: Refuse, code: errcode.ServerUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, code, full := tt.adm.Admit(tt.msg)
			if v != tt.verdict || code != tt.code || !strings.Contains(full, tt.fullText) {
				t.Fatalf("Admit = %d %q %q, want %d %q %q", v, code, full, tt.verdict, tt.code, tt.fullText)
			}
		})
	}
}
