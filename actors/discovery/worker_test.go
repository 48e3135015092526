package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// fakeStore keeps one server's rows in memory.
type fakeStore struct {
	mu       sync.Mutex
	srv      persistence.Server
	missing  bool
	tools    []persistence.ToolDef
	features []persistence.FeatureDef
	pins     persistence.PinSet
	writes   int
	readErr  error // GetServer fails with it
	writeErr error // ReplaceServerTools and ReplaceServerFeatures fail with it
	pinErr   error // SaveToolPins fails with it
}

func (f *fakeStore) GetServer(_ context.Context, id string) (persistence.Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readErr != nil {
		return persistence.Server{}, f.readErr
	}
	if f.missing || id != f.srv.ID {
		return persistence.Server{}, persistence.ErrNotFound
	}
	return f.srv, nil
}

func (f *fakeStore) ReplaceServerTools(_ context.Context, id string, defs []persistence.ToolDef, fence *persistence.Lease) (persistence.ToolDiff, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing {
		return persistence.ToolDiff{}, persistence.ErrNotFound
	}
	if fence == nil {
		return persistence.ToolDiff{}, persistence.ErrLeaseLost
	}
	if f.writeErr != nil {
		return persistence.ToolDiff{}, f.writeErr
	}
	f.writes++
	var d persistence.ToolDiff
	old := map[string]bool{}
	for _, t := range f.tools {
		old[t.OriginalName] = true
	}
	for _, t := range defs {
		if !old[t.OriginalName] {
			d.Added = append(d.Added, t.OriginalName)
		}
		delete(old, t.OriginalName)
	}
	for n := range old {
		d.Removed = append(d.Removed, n)
	}
	f.tools, d.Total = defs, len(defs)
	return d, nil
}

func (f *fakeStore) ReplaceServerFeatures(_ context.Context, id string, defs []persistence.FeatureDef, fence *persistence.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing {
		return persistence.ErrNotFound
	}
	if f.writeErr != nil {
		return f.writeErr
	}
	f.writes++
	f.features = defs
	return nil
}

func (f *fakeStore) ListToolPins(context.Context, string) (persistence.PinSet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pins, nil
}

func (f *fakeStore) SaveToolPins(_ context.Context, _ string, expect int64, pins []persistence.ToolPin, _ *persistence.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pinErr != nil {
		return f.pinErr
	}
	if expect != f.pins.Version {
		return persistence.ErrChanged
	}
	f.pins = persistence.PinSet{Version: expect + 1, Pins: pins}
	return nil
}

type harness struct {
	store  *fakeStore
	events []any
	listed [][]byte
	owned  bool
	w      *Worker
}

func newHarness(pinning bool) *harness {
	h := &harness{owned: true, store: &fakeStore{srv: persistence.Server{ID: "s1", Name: "one", Policy: persistence.ToolPolicy{Pinning: pinning, PinNewTools: persistence.PinNewServe}}}}
	h.w = NewWorker(Ports{
		ListTools: func(context.Context, string) ([][]byte, error) { return h.listed, nil },
		ListFeatures: func(context.Context, string) ([][]byte, [][]byte, [][]byte, error) {
			return raws(`{"name":"p"}`), raws(`{"uri":"file:///a"}`, `{"uri":"mcp-aggregator://x/y"}`), nil, nil
		},
		Fence: func(string) *persistence.Lease {
			if !h.owned {
				return nil
			}
			return &persistence.Lease{Epoch: 1}
		},
		Store:        h.store,
		Publish:      func(evt any) { h.events = append(h.events, evt) },
		PinHash:      func(_, name string, def []byte) (string, error) { return "h:" + string(def), nil },
		StoreTimeout: time.Second,
	})
	return h
}

func TestWorkerStoresAndPublishesTools(t *testing.T) {
	ctx := context.Background()
	h := newHarness(true)
	h.listed = raws(`{"name":"a"}`, `{"name":"b"}`)
	changed, err := h.w.Run(ctx, "s1", true)
	if err != nil || !changed {
		t.Fatalf("first run: changed %v, err %v", changed, err)
	}
	if len(h.events) != 1 {
		t.Fatalf("events %v, want one ToolsChanged", h.events)
	}
	evt, ok := h.events[0].(*pb.ToolsChanged)
	if !ok || evt.ServerId != "s1" || evt.ServerName != "one" || evt.Total != 2 || len(evt.Added) != 2 {
		t.Fatalf("event %+v", h.events[0])
	}
	if h.store.pins.Version != 1 || len(h.store.pins.Pins) != 2 {
		t.Fatalf("pins not recorded before the tools: %+v", h.store.pins)
	}

	// The same listing again, not forced (a list_changed): nothing stored, nothing published.
	changed, err = h.w.Run(ctx, "s1", false)
	if err != nil || changed || len(h.events) != 1 || h.store.writes != 1 {
		t.Fatalf("unchanged run: changed %v, err %v, events %d, writes %d", changed, err, len(h.events), h.store.writes)
	}
	// Forced (an admin refresh): stored and published although unchanged.
	if _, err := h.w.Run(ctx, "s1", true); err != nil || len(h.events) != 2 || h.store.writes != 2 {
		t.Fatalf("forced run: err %v, events %d, writes %d", err, len(h.events), h.store.writes)
	}
	// A new listing: stored, with what was removed.
	h.listed = raws(`{"name":"a"}`)
	changed, err = h.w.Run(ctx, "s1", false)
	if err != nil || !changed {
		t.Fatalf("changed run: changed %v, err %v", changed, err)
	}
	if evt := h.events[2].(*pb.ToolsChanged); len(evt.Removed) != 1 || evt.Removed[0] != "b" || evt.Total != 1 {
		t.Fatalf("event %+v", evt)
	}
	// Forgotten (the server was removed): the next equal listing is stored again.
	h.w.Forget("s1")
	if _, err := h.w.Run(ctx, "s1", false); err != nil || len(h.events) != 4 {
		t.Fatalf("after Forget: err %v, events %d", err, len(h.events))
	}
}

func TestWorkerWritesNothingItDoesNotOwn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		owned   bool
		missing bool
	}{
		{name: "not owned", owned: false},
		{name: "removed meanwhile", owned: true, missing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(true)
			h.owned, h.store.missing = tc.owned, tc.missing
			h.listed = raws(`{"name":"a"}`)
			for _, key := range []string{"s1", FeaturesKey("s1")} {
				changed, err := h.w.Run(context.Background(), key, true)
				if err != nil || changed {
					t.Errorf("%s: changed %v, err %v", key, changed, err)
				}
			}
			if len(h.events) != 0 || h.store.writes != 0 || h.store.pins.Version != 0 {
				t.Fatalf("events %v, writes %d, pins %+v", h.events, h.store.writes, h.store.pins)
			}
		})
	}
}

// TestWorkerTellsTheActorOfALostLease: a listing whose fenced write finds the lease gone (lapsed or taken) is not
// stored, and the server's actor is told, with the lease's epoch: a session left running without its lease would
// stay connected without the tools it listed (seen on one process whose lease renewals waited behind SQLite's writer).
func TestWorkerTellsTheActorOfALostLease(t *testing.T) {
	for _, pinning := range []bool{false, true} {
		for _, key := range []string{"s1", FeaturesKey("s1")} {
			t.Run(fmt.Sprintf("%s pinning=%v", key, pinning), func(t *testing.T) {
				h := newHarness(pinning)
				h.store.writeErr = fmt.Errorf("epoch 1: %w", persistence.ErrLeaseLost)
				h.store.pinErr = h.store.writeErr
				var lost []string
				h.w.p.LeaseLost = func(id string, epoch int64, why string) {
					lost = append(lost, fmt.Sprintf("%s@%d", id, epoch))
				}
				h.listed = raws(`{"name":"a"}`)
				if _, err := h.w.Run(context.Background(), key, true); err != nil {
					t.Fatalf("Run: %v (a lost lease is not a store failure to retry)", err)
				}
				if !slices.Equal(lost, []string{"s1@1"}) || len(h.events) != 0 {
					t.Fatalf("LeaseLost calls %v, events %v", lost, h.events)
				}
			})
		}
	}
}

func TestWorkerListingErrorStoresNothing(t *testing.T) {
	h := newHarness(false)
	boom := errors.New("backend gone")
	h.w.p.ListTools = func(context.Context, string) ([][]byte, error) { return nil, boom }
	if _, err := h.w.Run(context.Background(), "s1", true); !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
	if len(h.events) != 0 || h.store.writes != 0 {
		t.Fatalf("events %v, writes %d", h.events, h.store.writes)
	}
}

func TestWorkerStoresFeatures(t *testing.T) {
	h := newHarness(false)
	changed, err := h.w.Run(context.Background(), FeaturesKey("s1"), false)
	if err != nil || !changed {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	if len(h.store.features) != 2 {
		t.Fatalf("stored %+v, want the prompt and the one resource outside the reserved scheme", h.store.features)
	}
	evt, ok := h.events[0].(*pb.FeaturesChanged)
	if !ok || evt.ServerId != "s1" || evt.Prompts != 1 || evt.Resources != 2 {
		t.Fatalf("event %+v", h.events[0])
	}
	if changed, _ := h.w.Run(context.Background(), FeaturesKey("s1"), false); changed || len(h.events) != 1 {
		t.Fatalf("an unchanged listing was stored again (changed %v, events %d)", changed, len(h.events))
	}
}

// TestWorkerStoreFailureIsErrStore: a run that listed the server but could not read or write the store fails with
// ErrStore (the discovery actor runs it again), stores no tools without their pins, publishes nothing and does not
// remember the listing, so that the next run stores it even when it is not forced.
func TestWorkerStoreFailureIsErrStore(t *testing.T) {
	slow := fmt.Errorf("insert tools: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name           string
		key            string
		readErr, write error
	}{
		{name: "tools write", key: "s1", write: slow},
		{name: "server read before pinning", key: "s1", readErr: slow},
		{name: "features write", key: FeaturesKey("s1"), write: slow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(true)
			h.listed = raws(`{"name":"a"}`)
			h.store.readErr, h.store.writeErr = tc.readErr, tc.write
			_, err := h.w.Run(context.Background(), tc.key, true)
			if !errors.Is(err, ErrStore) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want ErrStore wrapping the store's error", err)
			}
			if len(h.events) != 0 || h.store.writes != 0 || len(h.store.tools) != 0 {
				t.Fatalf("events %v, writes %d, tools %v", h.events, h.store.writes, h.store.tools)
			}
			h.store.readErr, h.store.writeErr = nil, nil
			if changed, err := h.w.Run(context.Background(), tc.key, false); err != nil || !changed || len(h.events) != 1 {
				t.Fatalf("the next run, not forced: changed %v, err %v, events %d", changed, err, len(h.events))
			}
		})
	}
}

func TestWorkerListingErrorIsNotErrStore(t *testing.T) {
	h := newHarness(false)
	h.w.p.ListTools = func(context.Context, string) ([][]byte, error) { return nil, errors.New("backend gone") }
	if _, err := h.w.Run(context.Background(), "s1", true); err == nil || errors.Is(err, ErrStore) {
		t.Fatalf("err %v, want a listing error that is not ErrStore", err)
	}
}
