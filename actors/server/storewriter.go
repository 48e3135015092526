package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mcpgw/aggregator/actors/lifecycle"
)

// storeWriter runs one server actor's store writes in the order the actor made them, off its mailbox
// (lifecycle.Writer); a write that panics is logged with the actor's logger.
type storeWriter struct {
	log *slog.Logger
	w   lifecycle.Writer
}

func (w *storeWriter) enqueue(fn func()) { w.w.Enqueue(w.guard(fn)) }
func (w *storeWriter) enqueueKeyed(key string, fn func()) {
	w.w.EnqueueKeyed(key, w.guard(fn))
}
func (w *storeWriter) flush(ctx context.Context) bool { return w.w.Flush(ctx) }

// guard logs a write's panic (the writes after it still run).
func (w *storeWriter) guard(fn func()) func() {
	log := w.log
	return func() {
		defer func() {
			if r := recover(); r != nil && log != nil {
				log.Error("store write panicked", "panic", fmt.Sprint(r))
			}
		}()
		fn()
	}
}
