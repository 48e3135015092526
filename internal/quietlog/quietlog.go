// Package quietlog drops a library's routine log records: protoactor and the go-sdk log at info level what is
// noise to operators. It exists so that the daemon, the MCP endpoints and the proxy share one such filter.
package quietlog

import (
	"context"
	"log/slog"
)

// New is logger without its records below min.
func New(logger *slog.Logger, min slog.Level) *slog.Logger {
	return slog.New(levelFloor{logger.Handler(), min})
}

// levelFloor drops records below min before they reach the wrapped handler.
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (l levelFloor) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= l.min && l.Handler.Enabled(ctx, level)
}

func (l levelFloor) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelFloor{l.Handler.WithAttrs(attrs), l.min}
}

func (l levelFloor) WithGroup(name string) slog.Handler {
	return levelFloor{l.Handler.WithGroup(name), l.min}
}
