package membership

import (
	"bytes"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, nm := range []nodeMeta{
		{Name: "a", Capacity: 1, HTTPAddr: "127.0.0.1:8080", PeerAddr: "[::1]:9090", Replicas: 1},
		{Name: "node-7", Capacity: MaxCapacity, HTTPAddr: "archive.example.org:443", PeerAddr: "10.1.2.3:7000", Replicas: MaxReplicas},
	} {
		b, err := encodeMeta(nm)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMeta(b)
		if err != nil || got != nm {
			t.Errorf("decode(encode(%+v)) = %+v, %v", nm, got, err)
		}
		// A newer version's extra fields are ignored.
		newer := append([]byte{metaVersion + 1}, b[1:]...)
		newer = append(newer, 0xde, 0xad)
		if got, err := decodeMeta(newer); err != nil || got != nm {
			t.Errorf("newer version: %+v, %v", got, err)
		}
		// A version 1 node announces no replica count.
		v1 := append([]byte{1}, b[1:len(b)-1]...)
		want := nm
		want.Replicas = 0
		if got, err := decodeMeta(v1); err != nil || got != want {
			t.Errorf("version 1: %+v, %v; want %+v", got, err, want)
		}
	}
}

func TestMetaRejects(t *testing.T) {
	good, err := encodeMeta(nodeMeta{Name: "n", Capacity: 3, HTTPAddr: "h:1", PeerAddr: "h:2", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":        {},
		"version 0":    append([]byte{0}, good[1:]...),
		"trailing":     append(bytes.Clone(good), 0),
		"truncated":    good[:len(good)-1],
		"capacity 0":   {1, 0, 1, 'n', 3, 'h', ':', '1', 3, 'h', ':', '2'},
		"huge length":  {1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad name":     {1, 1, 1, 'N', 3, 'h', ':', '1', 3, 'h', ':', '2'},
		"bad port":     {1, 1, 1, 'n', 3, 'h', ':', 'x', 3, 'h', ':', '2'},
		"no host":      {1, 1, 1, 'n', 2, ':', '1', 3, 'h', ':', '2'},
		"control char": {1, 1, 1, 'n', 3, 0, ':', '1', 3, 'h', ':', '2'},
		"too long":     append(bytes.Clone(good), make([]byte, 600)...),
		"v1 trailing":  {1, 1, 1, 'n', 3, 'h', ':', '1', 3, 'h', ':', '2', 2},
		"no replicas":  {2, 1, 1, 'n', 3, 'h', ':', '1', 3, 'h', ':', '2'},
		"replicas 0":   {2, 1, 1, 'n', 3, 'h', ':', '1', 3, 'h', ':', '2', 0},
		"replicas big": {2, 1, 1, 'n', 3, 'h', ':', '1', 3, 'h', ':', '2', MaxReplicas + 1},
	} {
		if nm, err := decodeMeta(b); err == nil {
			t.Errorf("%s: decoded %+v", name, nm)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, err := encodeMeta(nodeMeta{Name: "node-1", Capacity: 4, HTTPAddr: "127.0.0.1:8080", PeerAddr: "[::1]:9090", Replicas: 3})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:5])
	f.Add(append([]byte{1}, good[1:len(good)-1]...))
	f.Add(append([]byte{3}, good[1:]...))
	f.Add([]byte{})
	f.Add([]byte{1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		nm, err := decodeMeta(b)
		if err != nil {
			return
		}
		if err := nm.validate(); err != nil {
			t.Fatalf("decoded invalid metadata %+v: %v", nm, err)
		}
		if nm.Replicas == 0 {
			if b[0] != 1 {
				t.Fatalf("version %d metadata decoded without a replica count", b[0])
			}
			nm.Replicas = 1 // encodeMeta writes the current version, which has one
		}
		enc, err := encodeMeta(nm)
		if err != nil {
			t.Fatalf("cannot re-encode %+v: %v", nm, err)
		}
		if b[0] == metaVersion && !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding %x gives %x", b, enc)
		}
	})
}
