package actors

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcpgw/aggregator/gateway"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The front ends' way to a backend's prompts and resources (issue 14): a FeatureRequest goes straight to the
// server actor that owns the backend's session, wherever it lives, with a deadline, like a tool call; a backend's
// notifications/resources/updated reaches the MCP endpoints of every process (through the feed) by OnResourceUpdated.

// Feature sends one resources/read, prompts/get, completion/complete or resources/(un)subscribe to a server, with
// params (the backend's own names and URIs) encoded as JSON. The reply carries the backend's result as JSON or an
// ErrorInfo naming the server.
func (s *System) Feature(ctx context.Context, serverID, method string, params any) (*pb.FeatureReply, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s params: %w", method, err)
	}
	deadline := s.callDeadline(ctx)
	msg := &pb.FeatureRequest{Method: method, ParamsJson: raw, DeadlineUnixMs: deadline.UnixMilli(), Subject: gateway.CallerSubject(ctx)}
	res, err := s.askServer(ctx, serverID, msg, deadline)
	if err != nil {
		return nil, err
	}
	reply, ok := res.(*pb.FeatureReply)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T to %s", res, method)
	}
	return reply, nil
}

// OnResourceUpdated calls fn with every backend's notifications/resources/updated (of this process's sessions and,
// through the feed, of the others') until the returned function is called. fn must not block.
func (s *System) OnResourceUpdated(fn func(*pb.ResourceUpdated)) (cancel func()) {
	return s.resourceHooks.Add(fn)
}

// maxFeedURI bounds the URIs sent to the other processes (a notice holds at most persistence.MaxNoticeBytes).
const maxFeedURI = 4096

func (s *System) deliverResourceUpdated(e *pb.ResourceUpdated, local bool) {
	s.resourceHooks.Call(e)
	if local && s.feed != nil && len(e.Uri) <= maxFeedURI {
		s.feed.Publish(e)
	}
}
