package membership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// metaVersion is the version of the node metadata encoding. Version 2 is:
//
//	version byte (2)
//	capacity   uvarint
//	name       uvarint length, bytes
//	HTTP addr  uvarint length, bytes
//	peer addr  uvarint length, bytes
//	replicas   uvarint
//
// Version 1 is the same without replicas: such a node's count is unknown
// (0) and goes unchecked. A later version may only append fields, so that
// its prefix stays readable by nodes that know this one; trailing bytes are
// refused in the versions this node knows, where they can only be
// corruption.
const metaVersion = 2

// MaxCapacity bounds a member's capacity. Capacities are relative, so the
// bound costs nothing real; it keeps one member from claiming so many
// virtual nodes that the ring cannot be built.
const MaxCapacity = 1000

// MaxReplicas bounds the number of copies a network keeps of each site:
// beyond it a node would spend its life replicating.
const MaxReplicas = 64

const (
	maxNameLen = 63  // a DNS label, as admission certifies names
	maxAddrLen = 255 // a DNS name and a port fit easily
)

// nodeMeta is what a node tells the others about itself in memberlist's
// node metadata.
type nodeMeta struct {
	Name     string
	Capacity int
	HTTPAddr string
	PeerAddr string
	Replicas int // 0: not announced (a version 1 node)
}

func (nm nodeMeta) validate() error {
	if err := validName(nm.Name); err != nil {
		return err
	}
	if nm.Capacity < 1 || nm.Capacity > MaxCapacity {
		return fmt.Errorf("capacity %d out of range [1, %d]", nm.Capacity, MaxCapacity)
	}
	if err := validAddr(nm.HTTPAddr); err != nil {
		return fmt.Errorf("HTTP address: %w", err)
	}
	if err := validAddr(nm.PeerAddr); err != nil {
		return fmt.Errorf("peer address: %w", err)
	}
	if nm.Replicas < 0 || nm.Replicas > MaxReplicas {
		return fmt.Errorf("replicas %d out of range [1, %d]", nm.Replicas, MaxReplicas)
	}
	return nil
}

// encodeMeta encodes nm, which must be valid, and checks that it fits
// memberlist's limit.
func encodeMeta(nm nodeMeta) ([]byte, error) {
	if err := nm.validate(); err != nil {
		return nil, err
	}
	if nm.Replicas == 0 {
		return nil, errors.New("replicas 0: at least 1")
	}
	b := []byte{metaVersion}
	b = binary.AppendUvarint(b, uint64(nm.Capacity))
	for _, s := range []string{nm.Name, nm.HTTPAddr, nm.PeerAddr} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(nm.Replicas))
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("metadata is %d bytes, more than memberlist's %d", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// decodeMeta decodes and validates metadata received from a peer.
func decodeMeta(b []byte) (nodeMeta, error) {
	var nm nodeMeta
	if len(b) == 0 {
		return nm, errors.New("no metadata")
	}
	if len(b) > memberlist.MetaMaxSize {
		return nm, fmt.Errorf("metadata is %d bytes, more than %d", len(b), memberlist.MetaMaxSize)
	}
	if b[0] == 0 {
		return nm, errors.New("metadata version 0")
	}
	// A newer version than this node's: read the prefix it knows below,
	// ignore the rest.
	rest, err := readCount(b[1:], &nm.Capacity, "capacity", MaxCapacity)
	if err != nil {
		return nm, err
	}
	for _, dst := range []*string{&nm.Name, &nm.HTTPAddr, &nm.PeerAddr} {
		l, n, err := uvarint(rest, "length")
		if err != nil {
			return nm, err
		}
		rest = rest[n:]
		if l > uint64(len(rest)) {
			return nm, errors.New("truncated string")
		}
		*dst = string(rest[:l])
		rest = rest[l:]
	}
	if b[0] >= 2 {
		if rest, err = readCount(rest, &nm.Replicas, "replicas", MaxReplicas); err != nil {
			return nm, err
		}
	}
	if len(rest) > 0 && b[0] <= metaVersion {
		return nm, fmt.Errorf("%d trailing bytes", len(rest))
	}
	if err := nm.validate(); err != nil {
		return nodeMeta{}, err
	}
	return nm, nil
}

// readCount reads a uvarint from 1 to max into dst and returns what follows.
func readCount(b []byte, dst *int, what string, max int) ([]byte, error) {
	v, n, err := uvarint(b, what)
	if err != nil {
		return nil, err
	}
	if v < 1 || v > uint64(max) {
		return nil, fmt.Errorf("%s %d out of range [1, %d]", what, v, max)
	}
	*dst = int(v)
	return b[n:], nil
}

// uvarint reads a uvarint in its shortest form. Longer forms of the same
// number are refused so that metadata has one encoding: peers compare it
// byte for byte to notice a change.
func uvarint(b []byte, what string) (uint64, int, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, fmt.Errorf("truncated %s", what)
	}
	if n > 1 && b[n-1] == 0 {
		return 0, 0, fmt.Errorf("%s in a longer form than needed", what)
	}
	return v, n, nil
}

// validName reports whether s is a node name as admission certifies them:
// a DNS label of lower-case letters, digits and hyphens.
func validName(s string) error {
	if len(s) == 0 || len(s) > maxNameLen {
		return fmt.Errorf("name %q: length not in [1, %d]", s, maxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return fmt.Errorf("name %q is not a DNS label", s)
		}
	}
	return nil
}

// validAddr reports whether s is an address other nodes can dial: a host
// (not an unspecified address) and a port from 1 to 65535.
func validAddr(s string) error {
	if len(s) > maxAddrLen {
		return fmt.Errorf("%d bytes, more than %d", len(s), maxAddrLen)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%q: bad character in host", s)
		}
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q: unspecified address cannot be dialled", s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || port[0] == '+' {
		return fmt.Errorf("%q: bad port", s)
	}
	return nil
}

// validID reports whether s looks like a certified ID: lower-case hex,
// as admission derives it (the hex of a hash).
func validID(s string) bool {
	if len(s) < 2 || len(s) > 128 || len(s)%2 != 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
