package dedup

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWireRoundTrip(t *testing.T) {
	digests := []string{digest(1), "sha256:" + strings.Repeat("F", 64), digest(1)}
	got, err := decodeLookup(encodeLookup(digests))
	if err != nil || !slices.Equal(got, digests) {
		t.Errorf("lookup round trip = %v, %v", got, err)
	}
	refs := []Ref{ref(1, 1), ref(2, 2), {
		Digest:   "sha1:Z",
		URL:      "https://例え.jp/パス?q=" + strings.Repeat("x", MaxURLBytes-40),
		Time:     time.Date(1996, 1, 1, 0, 0, 0, 1, time.UTC),
		RecordID: strings.Repeat("<", MaxRecordIDBytes),
	}}
	for _, kind := range []byte{kindFound, kindRefs} {
		got, err := decodeRefs(encodeRefs(kind, refs), kind)
		if err != nil || len(got) != len(refs) {
			t.Fatalf("refs round trip (%c) = %v, %v", kind, got, err)
		}
		for i := range got {
			if !equalRef(got[i], refs[i]) || got[i].Time.Location() != time.UTC {
				t.Errorf("refs round trip (%c)[%d] = %+v, want %+v", kind, i, got[i], refs[i])
			}
		}
	}
	if n, err := decodeAdded(encodeAdded(42)); err != nil || n != 42 {
		t.Errorf("added round trip = %d, %v", n, err)
	}
	if n, err := decodeAdded(encodeAdded(MaxEntries + 1)); err == nil {
		t.Errorf("an answer of %d added decoded", n)
	}
	for _, reg := range []registration{{Ref: ref(3, 3)}, {Ref: ref(3, 4), replaces: ref(3, 3).RecordID}} {
		if e, err := decodeEntry(digest(3), encodeEntry(reg)); err != nil || !equalRef(e.Ref, reg.Ref) || e.replaces != reg.replaces {
			t.Errorf("entry round trip = %+v, %v; want %+v", e, err, reg)
		}
	}
}

func TestFittingLimitsAnAnswer(t *testing.T) {
	long := make([]Ref, MaxEntries)
	for i := range long {
		long[i] = ref(i, 1)
		long[i].URL = "http://a/" + strings.Repeat("a", MaxURLBytes-9)
	}
	fit := fitting(long)
	if len(fit) == len(long) || len(fit) == 0 {
		t.Fatalf("fitting kept %d of %d refs of %d-byte URLs", len(fit), len(long), MaxURLBytes)
	}
	body := encodeRefs(kindFound, fit)
	if len(body) > MaxBodyBytes {
		t.Errorf("an answer of %d bytes, over MaxBodyBytes", len(body))
	}
	if got, err := decodeRefs(body, kindFound); err != nil || len(got) != len(fit) {
		t.Errorf("decoding the fitted answer: %d refs, %v", len(got), err)
	}
}

func FuzzDecodeLookup(f *testing.F) {
	f.Add(encodeLookup(nil))
	f.Add(encodeLookup([]string{digest(1), "sha256:AB"}))
	f.Add([]byte{'W', 'G', 'D', 1, kindLookup, 0xff, 0x1f})
	f.Add([]byte("WGD"))
	f.Fuzz(func(t *testing.T, body []byte) {
		digests, err := decodeLookup(body)
		if err != nil {
			return
		}
		for _, d := range digests {
			if checkDigest(d) != nil {
				t.Fatalf("decoded invalid digest %q", d)
			}
		}
		again, err := decodeLookup(encodeLookup(digests))
		if err != nil || !slices.Equal(again, digests) {
			t.Fatalf("re-encoding %q: %q, %v", digests, again, err)
		}
	})
}

func FuzzDecodeRefs(f *testing.F) {
	f.Add(encodeRefs(kindRefs, nil))
	f.Add(encodeRefs(kindRefs, []Ref{ref(1, 1), ref(2, 2)}))
	f.Add(encodeRefs(kindFound, []Ref{ref(3, 1)}))
	f.Add([]byte{'W', 'G', 'D', 1, kindRefs, 1, 1, 'a', 1, 'b', 0, 1, 'c'})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, kind := range []byte{kindRefs, kindFound} {
			refs, err := decodeRefs(body, kind)
			if err != nil {
				continue
			}
			for _, r := range refs {
				if err := r.check(); err != nil {
					t.Fatalf("decoded invalid ref: %v", err)
				}
			}
			again, err := decodeRefs(encodeRefs(kind, refs), kind)
			if err != nil || len(again) != len(refs) {
				t.Fatalf("re-encoding %d refs: %d, %v", len(refs), len(again), err)
			}
			for i := range again {
				if !equalRef(again[i], refs[i]) {
					t.Fatalf("re-encoded ref %+v, want %+v", again[i], refs[i])
				}
			}
		}
	})
}

func FuzzDecodeAdded(f *testing.F) {
	f.Add(encodeAdded(0))
	f.Add(encodeAdded(MaxEntries))
	f.Add([]byte{'W', 'G', 'D', 1, kindAdded, 0x80})
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := decodeAdded(body)
		if err != nil {
			return
		}
		if n < 0 || n > MaxEntries {
			t.Fatalf("decoded %d added", n)
		}
	})
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(registration{Ref: ref(1, 1)}))
	f.Add(encodeEntry(registration{Ref: ref(1, 2), replaces: ref(1, 1).RecordID}))
	f.Add([]byte{entryVersion, 1, 'x', 2, 1, '<'})
	f.Add([]byte{entryReplacing, 1, 'x', 2, 1, '<', 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeEntry(digest(1), v)
		if err != nil {
			return
		}
		if err := r.check(); err != nil {
			t.Fatalf("decoded invalid entry: %v", err)
		}
		if (r.replaces != "") != (v[0] == entryReplacing) {
			t.Fatalf("an entry of version %d decoded to %+v", v[0], r)
		}
		if again, err := decodeEntry(digest(1), encodeEntry(r)); err != nil || !equalRef(again.Ref, r.Ref) || again.replaces != r.replaces {
			t.Fatalf("re-encoding %+v: %+v, %v", r, again, err)
		}
	})
}

func FuzzDecodeRegistrations(f *testing.F) {
	f.Add(encodeRegistrations(nil))
	f.Add(encodeRegistrations([]registration{{Ref: ref(1, 1)}, {Ref: ref(2, 2)}}))
	f.Add(encodeRegistrations([]registration{{Ref: ref(1, 2), replaces: ref(1, 1).RecordID}}))
	f.Add([]byte{'W', 'G', 'D', 1, kindReplace, 1, 1, 'a', 1, 'b', 0, 1, 'c', 1, 'd'})
	f.Fuzz(func(t *testing.T, body []byte) {
		regs, err := decodeRegistrations(body)
		if err != nil {
			return
		}
		replacing := len(body) >= headerSize && body[4] == kindReplace
		for _, r := range regs {
			if err := r.check(); err != nil {
				t.Fatalf("decoded invalid registration: %v", err)
			}
			if (r.replaces != "") != replacing {
				t.Fatalf("a body of kind %q decoded to %+v", body[4], r)
			}
		}
		again, err := decodeRegistrations(encodeRegistrations(regs))
		if err != nil || len(again) != len(regs) {
			t.Fatalf("re-encoding %d registrations: %d, %v", len(regs), len(again), err)
		}
		for i := range again {
			if !equalRef(again[i].Ref, regs[i].Ref) || again[i].replaces != regs[i].replaces {
				t.Fatalf("re-encoded registration %+v, want %+v", again[i], regs[i])
			}
		}
	})
}
