package crawl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// minRoom is the free space the database wants beyond its log to open: the
// manifest and options files it rewrites, the first flushes.
const minRoom = 32 << 20

// checkRoom refuses to open the database in dir (which may not exist yet)
// on a filesystem with too little free space. Opening replays the log and
// writes it out as tables; pebble retries a write that fails for want of
// space for ever, inside Open, so that a full disk would leave the command
// spinning with nothing said. free reports the bytes free for dir's
// filesystem (ok false where that is not known: the check is skipped).
// maxLog bounds what the log can hold unwritten (the memtables that may
// fill before writes stall): the log files are more, as pebble keeps
// spent ones to recycle and allocates ahead.
func checkRoom(dir string, maxLog int64, free func(string) (int64, bool)) error {
	at := dir
	if _, err := os.Stat(dir); err != nil {
		at = filepath.Dir(dir) // a new archive: its parent's filesystem
	}
	avail, ok := free(at)
	if !ok {
		return nil
	}
	var logs int64
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".log") {
				continue
			}
			if info, err := e.Info(); err == nil {
				logs += info.Size()
			}
		}
	}
	need := minRoom + min(logs, maxLog)
	if avail < need {
		return fmt.Errorf("%s: %.1f MiB free on its filesystem, and opening the database needs %.1f MiB (it writes out its log): free some space, or move the data directory to a larger disk",
			dir, float64(avail)/(1<<20), float64(need)/(1<<20))
	}
	return nil
}
