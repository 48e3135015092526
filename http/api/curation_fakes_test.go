package api

import (
	"context"

	"github.com/mcpgw/aggregator/persistence"
)

// The fake store's curation reads: nothing is curated (enough for the routes' shape and their bad-input answers;
// the curation behaviour is tested on the real store in http/api/integration).

func (f *fakeStore) ListToolPins(ctx context.Context, id string) (persistence.PinSet, error) {
	if _, err := f.GetServer(ctx, id); err != nil {
		return persistence.PinSet{}, err
	}
	return persistence.PinSet{}, nil
}

func (f *fakeStore) ListToolOverrides(ctx context.Context, id string) ([]persistence.ToolOverride, error) {
	return nil, nil
}

func (f *fakeStore) ListProfiles(context.Context) ([]persistence.Profile, error) { return nil, nil }

func (f *fakeStore) GetProfile(context.Context, string) (persistence.Profile, error) {
	return persistence.Profile{}, persistence.ErrNotFound
}

// The fake control's curation writes: accepted and echoed, or not found.

func (f *fakeControl) SetToolPolicy(ctx context.Context, id string, p persistence.ToolPolicyPatch) (persistence.Server, error) {
	srv, err := f.store.GetServer(ctx, id)
	if err != nil {
		return srv, err
	}
	if p.Filter != nil {
		srv.Policy.Filter = *p.Filter
	}
	if p.Pinning != nil {
		srv.Policy.Pinning = *p.Pinning
	}
	return srv, nil
}

func (f *fakeControl) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (persistence.ToolOverride, error) {
	if _, err := f.store.GetServer(ctx, o.ServerID); err != nil {
		return o, err
	}
	return o, nil
}

func (f *fakeControl) DeleteToolOverride(context.Context, string, string) error {
	return persistence.ErrNotFound
}

func (f *fakeControl) ResolveToolChange(context.Context, string, string, bool, string) (persistence.ToolPin, error) {
	return persistence.ToolPin{}, persistence.ErrNotFound
}

func (f *fakeControl) PutProfile(_ context.Context, p persistence.Profile) (persistence.Profile, bool, error) {
	return p, true, nil
}

func (f *fakeControl) DeleteProfile(context.Context, string) error { return persistence.ErrNotFound }
