package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
)

// FetchLoop fetches every URL once through proxy with plain net/http at the
// given concurrency and reads each body to the end, doing nothing else: the
// most a crawler could do on this machine against the same server.
func FetchLoop(ctx context.Context, proxy string, workers int, urls []string) (requests, bytes int64, err error) {
	p, err := url.Parse(proxy)
	if err != nil {
		return 0, 0, fmt.Errorf("bench: proxy: %w", err)
	}
	client := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(p), MaxIdleConnsPerHost: workers},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	defer client.CloseIdleConnections()
	var next, nreq, nbytes atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(urls) || ctx.Err() != nil {
					return
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, urls[i], nil)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				// Ask for what the crawler asks for; setting it ourselves
				// also stops net/http from decompressing (no processing).
				req.Header.Set("Accept-Encoding", "gzip, br")
				resp, err := client.Do(req)
				if err != nil {
					once.Do(func() { firstErr = err })
					continue
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				nreq.Add(1)
				nbytes.Add(n)
			}
		}()
	}
	wg.Wait()
	return nreq.Load(), nbytes.Load(), firstErr
}
