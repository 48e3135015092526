package actors

import (
	"context"
	"fmt"
	"time"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// ListToolsOf asks a server actor for its tools/list, as discovery does, so tests can see the reply's error code.
func ListToolsOf(ctx context.Context, s *System, id string) (*pb.ListToolsReply, error) {
	res, err := s.askServer(ctx, id, &pb.ListTools{}, time.Now().Add(s.deps.Config.RequestTimeout))
	if err != nil {
		return nil, err
	}
	r, ok := res.(*pb.ListToolsReply)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T", res)
	}
	return r, nil
}
