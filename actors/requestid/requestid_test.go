package requestid

import (
	"context"
	"testing"
)

func TestWithFrom(t *testing.T) {
	if got := From(context.Background()); got != "" {
		t.Errorf("empty ctx: %q", got)
	}
	ctx := With(context.Background(), "abc")
	if got := From(ctx); got != "abc" {
		t.Errorf("got %q", got)
	}
	if got := From(context.WithValue(ctx, struct{}{}, "other")); got != "abc" {
		t.Errorf("derived ctx: %q", got)
	}
}
