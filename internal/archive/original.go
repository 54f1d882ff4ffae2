package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// ErrNoOriginal reports a revisit whose payload no capture of the archive
// holds.
var ErrNoOriginal = errors.New("archive: the payload the revisit refers to is not in the archive")

// Original finds the capture holding the payload of revisit c, whose
// record header is h: the capture of WARC-Refers-To-Target-URI at
// WARC-Refers-To-Date when h names them — which may sit on any node, as
// the network's content-seen test names captures wherever they are — else
// the first capture of c's payload digest on c's node. The error wraps
// ErrNoOriginal when neither is a capture holding the payload.
func Original(ctx context.Context, a Archive, c index.Capture, h warc.Header) (index.Capture, error) {
	chained := false // the capture named is itself a revisit
	if uri := h.Get("WARC-Refers-To-Target-URI"); uri != "" {
		when, derr := warc.ParseDate(h.Get("WARC-Refers-To-Date"))
		if key, kerr := urlkey.SURT(uri); derr == nil && kerr == nil {
			o, ok, revisit, err := referredTo(ctx, a, key, uri, when, c.Digest)
			if err != nil {
				return index.Capture{}, err
			}
			if ok {
				return o, nil
			}
			chained = revisit
		}
	}
	if c.Digest != "" {
		orig, ok, err := a.ByDigest(ctx, c, c.Digest)
		if err != nil {
			return index.Capture{}, err
		}
		if ok && orig.Type == warc.TypeRevisit {
			chained = true
		} else if ok {
			return orig, nil
		}
	}
	if chained {
		return index.Capture{}, fmt.Errorf("%w: the capture named is another revisit, and the payload is stored nowhere else", ErrNoOriginal)
	}
	return index.Capture{}, ErrNoOriginal
}

// referredTo finds the capture of uri (URL key key) taken at when, holding
// the payload with this digest (when known). WARC dates may have only
// second precision, and one URL key covers several URLs, which a site's
// redirects between them fetch within one second: the capture at the
// exact time is preferred, then the one of uri itself. revisit reports
// that the capture named is a revisit, which cannot hold the payload.
func referredTo(ctx context.Context, a Archive, key, uri string, when time.Time, digest string) (found index.Capture, ok, revisit bool, err error) {
	canon, cerr := urlkey.Canonical("", uri)
	if cerr != nil {
		canon = uri
	}
	sec := when.Truncate(time.Second)
	best := -1
	err = a.Captures(ctx, key, false, func(o index.Capture) (bool, error) {
		ot := o.Time.Truncate(time.Second)
		if ot.After(sec) {
			return false, nil // in time order: past the second named
		}
		if !ot.Equal(sec) || digest != "" && o.Digest != "" && o.Digest != digest {
			return true, nil
		}
		score := 0
		if o.Time.Equal(when) {
			score += 2
		}
		if o.URL == canon || o.URL == uri {
			score++
		}
		if o.Type == warc.TypeRevisit {
			revisit = revisit || score > 0
			return true, nil
		}
		if score > best {
			found, best = o, score
		}
		return true, nil
	})
	return found, best >= 0, revisit, err
}
