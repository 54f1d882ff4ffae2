package membership

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
)

// logWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// slog records at the matching level.
type logWriter struct {
	log   *slog.Logger
	quiet atomic.Bool // shutting down: everything at debug level
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, l := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelError},
		{"[ERROR]", slog.LevelError},
	} {
		if rest, ok := bytes.CutPrefix(line, []byte(l.prefix)); ok {
			level, line = l.level, bytes.TrimSpace(rest)
			break
		}
	}
	if w.quiet.Load() {
		level = min(level, slog.LevelDebug)
	}
	if w.log.Enabled(context.Background(), level) {
		w.log.Log(context.Background(), level, string(line))
	}
	return len(p), nil
}
