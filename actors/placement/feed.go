package placement

import (
	"context"
	"encoding/base64"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The cross-process feed. Processes that share a store (several `serve` nodes, or a standby beside the process that
// serves) each keep a routing table, an MCP endpoint and a search index of every server, but only the owner of a
// server sees its status and tool changes happen. So each process sends the events its own actors publish
// (registrations, renames, deletes, status changes, stored tools, classifications; and durable tasks' status
// changes, which go to the task manager) through the store's Feed (PostgreSQL NOTIFY), and hands the events of the others to its router (which derives the served catalogue and
// hands the indexer its deltas), as if its own actors had published them. Discovery and classification react only to their own process's events: they run once per
// change, on the owner. A listener that reconnects has missed notices and reloads the routing table from the store
// (and the index through the router's deltas). Status events carry the owner's lease epoch and a sequence, so that a late notice from an earlier
// owner never overwrites a newer status.

// feedQueue bounds the events waiting to be sent; beyond it events are dropped (and counted in the log): a
// database too slow to take them is unreachable for the listeners too, which reload when they reconnect.
const feedQueue = 4096

// Feed sends this process's events to the store's feed and delivers the others'.
type Feed struct {
	feed    persistence.Feed
	node    string
	out     chan *pb.FeedEvent
	dropped atomic.Int64
	log     *slog.Logger
}

// StartFeed connects process node to the store's feed, when the store has one (ok false otherwise); it runs
// until ctx ends. deliver gets the events of the other processes (on the feed's goroutine); reconnected is called
// when the feed's connection came back after a break (notices were missed: the caller reloads from the store).
func StartFeed(ctx context.Context, store persistence.Store, node string, log *slog.Logger, deliver func(evt any), reconnected func()) (*Feed, bool) {
	feed, ok := persistence.FeedOf(store)
	if !ok {
		return nil, false
	}
	b := &Feed{feed: feed, node: node, out: make(chan *pb.FeedEvent, feedQueue), log: log}
	go b.send(ctx)
	first := true
	go func() {
		_ = feed.Listen(ctx, func(payload string) {
			if evt, ok := b.decode(payload); ok {
				deliver(evt)
			}
		}, func() {
			if first {
				first = false // the first connection: the tables were just loaded from the store
				return
			}
			log.Info("feed: reconnected; reloading the routing table and the search index from the store")
			reconnected()
		})
	}()
	return b, true
}

// Publish queues one of this process's events for the other processes (other events are not sent).
func (b *Feed) Publish(evt any) {
	fe := &pb.FeedEvent{Node: b.node}
	switch e := evt.(type) {
	case *pb.ServerStatusChanged:
		fe.Event = &pb.FeedEvent_Status{Status: e}
	case *pb.ServerUpdated:
		fe.Event = &pb.FeedEvent_Updated{Updated: e}
	case *pb.ServerRemoved:
		fe.Event = &pb.FeedEvent_Removed{Removed: e}
	case *pb.ToolsChanged:
		// Receivers reload the server's tools from the store; the name lists could outgrow a notice.
		fe.Event = &pb.FeedEvent_Tools{Tools: &pb.ToolsChanged{ServerId: e.ServerId, ServerName: e.ServerName, Total: e.Total}}
	case *pb.ClassificationDone:
		fe.Event = &pb.FeedEvent_Classified{Classified: &pb.ClassificationDone{ServerId: e.ServerId}}
	case *pb.ProfilesChanged:
		fe.Event = &pb.FeedEvent_Profiles{Profiles: e}
	case *pb.FeaturesChanged:
		fe.Event = &pb.FeedEvent_Features{Features: e}
	case *pb.ResourceUpdated:
		fe.Event = &pb.FeedEvent_ResourceUpdated{ResourceUpdated: e}
	case *pb.TaskStatusChanged:
		fe.Event = &pb.FeedEvent_TaskStatus{TaskStatus: e}
	default:
		return
	}
	select {
	case b.out <- fe:
	default:
		b.dropped.Add(1)
	}
}

// send writes queued events to the feed until ctx ends.
func (b *Feed) send(ctx context.Context) {
	var lastWarn time.Time
	for {
		var fe *pb.FeedEvent
		select {
		case <-ctx.Done():
			return
		case fe = <-b.out:
		}
		raw, err := proto.Marshal(fe)
		if err == nil {
			nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = b.feed.Notify(nctx, base64.StdEncoding.EncodeToString(raw))
			cancel()
		}
		if n := b.dropped.Swap(0); (err != nil || n > 0) && time.Since(lastWarn) > 10*time.Second {
			lastWarn = time.Now()
			b.log.Warn("feed: events not sent to the other processes (they reload from the store when their feed reconnects)",
				"error", err, "dropped", n)
		}
	}
}

// decode is another process's event in a notice (false: this process's own, or not an event).
func (b *Feed) decode(payload string) (any, bool) {
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, false
	}
	fe := &pb.FeedEvent{}
	if proto.Unmarshal(raw, fe) != nil || fe.Node == b.node {
		return nil, false
	}
	var evt any
	switch e := fe.Event.(type) {
	case *pb.FeedEvent_Status:
		evt = e.Status
	case *pb.FeedEvent_Updated:
		evt = e.Updated
	case *pb.FeedEvent_Removed:
		evt = e.Removed
	case *pb.FeedEvent_Tools:
		evt = e.Tools
	case *pb.FeedEvent_Classified:
		evt = e.Classified
	case *pb.FeedEvent_Profiles:
		evt = e.Profiles
	case *pb.FeedEvent_Features:
		evt = e.Features
	case *pb.FeedEvent_ResourceUpdated:
		evt = e.ResourceUpdated
	case *pb.FeedEvent_TaskStatus:
		evt = e.TaskStatus
	default:
		return nil, false
	}
	return evt, true
}
