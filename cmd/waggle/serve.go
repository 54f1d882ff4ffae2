package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/replay"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[flags]", stderr)
	data := fs.String("data", "./waggle-data", "data directory of the archive")
	httpAddr := fs.String("http", "127.0.0.1:8080", "address of the web interface")
	contentAddr := fs.String("content-http", "", "address replayed pages are served from, a separate origin (default: the --http host, next port)")
	cacheBytes := fs.Int64("replay-cache", replay.DefaultPayloadCacheBytes, "bytes of large payloads (videos…) kept in memory for their range requests; 0 for none")
	spoolBytes := fs.Int64("replay-spool", replay.DefaultSpoolBytes, "bytes of the payloads of captures over 64 MiB kept on disk (DIR/replay-spool) once replayed, for their range requests; 0 for none")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	db, err := crawl.OpenExistingDB(*data)
	if err != nil {
		return err
	}
	defer db.Close()
	ui, content, err := replay.Listen(*httpAddr, *contentAddr)
	if err != nil {
		return err
	}
	return serveArchive(ctx, index.New(db), *data, ui, content, replayMemory{*cacheBytes, *spoolBytes}, stdout, stderr)
}

// replayMemory is what replay keeps of large payloads, as the flags say it:
// --replay-cache bytes in memory, --replay-spool bytes on disk; 0 means
// none.
type replayMemory struct{ cache, spool int64 }

var defaultReplayMemory = replayMemory{replay.DefaultPayloadCacheBytes, replay.DefaultSpoolBytes}

// serveArchive serves replay of the archive in the data directory data,
// whose index is idx, on the two listeners until ctx is done.
func serveArchive(ctx context.Context, idx *index.Index, data string, ui, content net.Listener, mem replayMemory, stdout, stderr io.Writer) error {
	srv := replay.New(replay.Config{
		Archive:           archive.NewLocal(idx, filepath.Join(data, "warc")),
		UIAddr:            ui.Addr().String(),
		ContentAddr:       content.Addr().String(),
		PayloadCacheBytes: replayCacheBytes(mem.cache),
		SpoolDir:          filepath.Join(data, "replay-spool"),
		SpoolBytes:        replayCacheBytes(mem.spool),
		Logger:            slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	fmt.Fprintf(stdout, "Replay: open http://%s/ (replayed pages are served from http://%s/). Ctrl-C stops.\n", browsable(ui.Addr()), browsable(content.Addr()))
	return replay.Serve(ctx, srv, ui, content)
}

// browsable names a listener's address as a browser on this machine reaches it.
func browsable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("localhost", fmt.Sprint(tcp.Port))
}

// replayCacheBytes turns a --replay-cache or --replay-spool value, where 0
// means none, into replay.Config.PayloadCacheBytes or SpoolBytes, where 0
// means the default.
func replayCacheBytes(flag int64) int64 {
	if flag <= 0 {
		return -1
	}
	return flag
}
