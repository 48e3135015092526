package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Discovery of what a backend offers besides tools: its prompts, resources and resource templates are listed
// through its actor on every successful connection, on notifications/{prompts,resources}/list_changed and on an
// admin refresh, stored (replacing the server's previous ones) and published as FeaturesChanged, which the
// routers of every process turn into their routing tables. A run is keyed apart from the tool discovery of the
// same server (featuresKey), so the two coalesce separately.

const featuresKeyPrefix = "features:"

// featuresKey is the discovery actor's key of a server's feature discovery.
func featuresKey(id string) string { return featuresKeyPrefix + id }

// discoverKey runs the discovery a discovery actor's key names: tools for a server id, features for featuresKey.
func (s *System) discoverKey(ctx context.Context, key string, forced bool) error {
	if id, ok := strings.CutPrefix(key, featuresKeyPrefix); ok {
		return s.discoverFeatures(ctx, id, forced)
	}
	return s.discover(ctx, key, forced)
}

// discoverFeatures lists a server's prompts, resources and resource templates through its actor and stores them;
// unless forced, not when they are what this process stored last (see discover).
func (s *System) discoverFeatures(ctx context.Context, id string, forced bool) error {
	start := time.Now()
	deadline := time.Now().Add(s.deps.Config.RequestTimeout)
	res, err := s.askServer(ctx, id, &pb.ListFeatures{}, deadline)
	if err != nil {
		return err
	}
	reply, ok := res.(*pb.ListFeaturesReply)
	if !ok {
		return fmt.Errorf("unexpected reply %T to list features", res)
	}
	if reply.Error != nil {
		return fmt.Errorf("prompts/resources list: %s", reply.Error.Message)
	}
	defs := make([]persistence.FeatureDef, 0, len(reply.PromptsJson)+len(reply.ResourcesJson)+len(reply.TemplatesJson))
	skipped := 0
	reserved := map[string]int{} // by kind
	add := func(kind, field string, items [][]byte) {
		for _, raw := range items {
			var obj map[string]json.RawMessage
			var key string
			if json.Unmarshal(raw, &obj) != nil || json.Unmarshal(obj[field], &key) != nil || key == "" {
				skipped++
				continue
			}
			if kind != persistence.FeaturePrompt && routing.IsReservedURI(key) {
				reserved[kind]++ // the aggregator's own scheme: listing it would capture reads of another server's URIs
				continue
			}
			defs = append(defs, persistence.FeatureDef{Kind: kind, Key: key, Definition: raw})
		}
	}
	add(persistence.FeaturePrompt, "name", reply.PromptsJson)
	add(persistence.FeatureResource, "uri", reply.ResourcesJson)
	add(persistence.FeatureResourceTemplate, "uriTemplate", reply.TemplatesJson)
	if skipped > 0 {
		s.deps.Logger.Warn("skipping prompts or resources the server listed without a usable name or URI", "server_id", id, "skipped", skipped)
	}
	fence := s.deps.owners.fence(id)
	if fence == nil {
		s.deps.Logger.Info("prompts and resources not stored: this process no longer owns the server", "server_id", id)
		return nil
	}
	key := featuresKey(id)
	sum := floodguard.Sum(reply.PromptsJson, reply.ResourcesJson, reply.TemplatesJson)
	if !forced && s.listings.Same(key, fence.Epoch, sum) {
		s.deps.Logger.Debug("prompts and resources unchanged after list_changed: nothing stored", "server_id", id)
		return nil
	}
	sctx, cancel := storeCtx()
	defer cancel()
	err = s.deps.Store.ReplaceServerFeatures(sctx, id, defs, fence)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil // removed meanwhile
	}
	if errors.Is(err, persistence.ErrLeaseLost) {
		s.deps.Logger.Info("prompts and resources not stored: the server's lease moved on", "server_id", id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("store prompts and resources: %w", err)
	}
	srv, _ := s.deps.Store.GetServer(sctx, id)
	if n := reserved[persistence.FeatureResource] + reserved[persistence.FeatureResourceTemplate]; n > 0 {
		s.deps.Logger.Warn("dropping resources and templates the server listed under the aggregator's reserved "+routing.RewrittenURIScheme+":// scheme",
			"server_id", id, "server", srv.Name, "resources", reserved[persistence.FeatureResource],
			"templates", reserved[persistence.FeatureResourceTemplate])
		for kind, k := range reserved {
			s.deps.Metrics.ReservedURIs(srv.Name, kind, k)
		}
	}
	evt := &pb.FeaturesChanged{ServerId: id, ServerName: srv.Name, Prompts: int32(len(reply.PromptsJson)),
		Resources: int32(len(reply.ResourcesJson)), Templates: int32(len(reply.TemplatesJson))}
	s.deps.Logger.Info("prompts and resources discovered", "server_id", id, "server", srv.Name, "prompts", evt.Prompts,
		"resources", evt.Resources, "templates", evt.Templates, "took", time.Since(start).String())
	s.sys.EventStream.Publish(evt)
	s.listings.Remember(key, fence.Epoch, sum)
	return nil
}
