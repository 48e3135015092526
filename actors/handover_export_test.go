package actors

import (
	"context"
	"time"
)

// Deactivate retires a server's actor as a hand-over does: its calls in flight may go on for up to drain.
func Deactivate(ctx context.Context, s *System, id string, drain time.Duration) error {
	return s.deactivate(ctx, id, drain, "test hand-over")
}
