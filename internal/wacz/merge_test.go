package wacz

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// The index yields the lines of one key and second in capture order and
// the originals come separately; the merged index must still be in byte
// order, which readers that binary-search it rely on.
func TestMergeCDXJByteOrder(t *testing.T) {
	main := strings.Join([]string{
		`com,example)/ 20260101000000 {"url":"http://example.com/","digest":"sha1:ZZ"}`,
		`com,example)/ 20260101000000 {"url":"http://example.com/","digest":"sha1:AA"}`,
		`com,example)/a 20260101000000 {"url":"http://example.com/a","digest":"sha1:MM"}`,
		`com,example)/c 20260101000001 {"url":"http://example.com/c","digest":"sha1:BB"}`,
	}, "\n") + "\n"
	extra := [][]byte{
		[]byte(`com,example)/c 20260101000001 {"url":"http://example.com/c","digest":"sha1:AA"}` + "\n"),
		[]byte(`com,example)/ 20260101000000 {"url":"http://example.com/","digest":"sha1:BB"}` + "\n"),
		[]byte(`com,example)/b 20250101000000 {"url":"http://example.com/b","digest":"sha1:QQ"}` + "\n"),
		[]byte(`com,example)/z 20250101000000 {"url":"http://example.com/z","digest":"sha1:QQ"}` + "\n"),
	}
	var want []string
	for _, l := range strings.SplitAfter(main, "\n") {
		if l != "" {
			want = append(want, l)
		}
	}
	for _, l := range extra {
		want = append(want, string(l))
	}
	slices.Sort(want)

	var out bytes.Buffer
	if err := mergeCDXJ(&out, strings.NewReader(main), extra); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != strings.Join(want, "") {
		t.Errorf("merged:\n%s\nwant:\n%s", got, strings.Join(want, ""))
	}
}
