package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
)

func TestNetworkInitAdmit(t *testing.T) {
	tmp := t.TempDir()
	netdir := filepath.Join(tmp, "net")
	waggle := func(args ...string) (code int, stdout, stderr string) {
		var out, errs bytes.Buffer
		code = run(context.Background(), args, &out, &errs)
		return code, out.String(), errs.String()
	}

	if code, out, errs := waggle("network", "init", "--dir", netdir); code != 0 || !strings.Contains(out, "ca.key") {
		t.Fatalf("network init: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := waggle("network", "init", "--dir", netdir); code != 1 || !strings.Contains(errs, "already holds a network") {
		t.Errorf("second network init: exit %d, %q", code, errs)
	}

	cred := filepath.Join(tmp, "node-1.pem")
	issued := time.Now().Truncate(time.Second) // certificates count in seconds
	code, out, errs := waggle("network", "admit", "--dir", netdir, "--name", "node-1", "--out", cred, "--valid", "720h")
	if code != 0 {
		t.Fatalf("network admit: exit %d\n%s%s", code, out, errs)
	}
	c, err := admission.Load(cred)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "node-1" || !strings.Contains(out, "node ID:     "+c.ID()+"\n") || !strings.Contains(out, "--network "+cred) {
		t.Errorf("admitted %s %s; output:\n%s", c.Name(), c.ID(), out)
	}
	if na := c.NotAfter(); na.Before(issued.Add(720*time.Hour)) || na.After(time.Now().Add(720*time.Hour)) {
		t.Errorf("--valid 720h: expires %v, issued about %v", na, issued)
	}

	// An existing credential is not overwritten, and nothing is issued.
	before, _ := os.ReadFile(cred)
	if code, _, errs := waggle("network", "admit", "--dir", netdir, "--name", "node-2", "--out", cred); code != 1 || !strings.Contains(errs, "exists") {
		t.Errorf("admit over an existing file: exit %d, %q", code, errs)
	}
	if after, _ := os.ReadFile(cred); !bytes.Equal(before, after) {
		t.Error("credential file changed")
	}
	if log, _ := os.ReadFile(filepath.Join(netdir, "admitted.log")); strings.Contains(string(log), "node-2") {
		t.Errorf("refused admission recorded:\n%s", log)
	}

	// Renewal keeps the ID.
	renewed := filepath.Join(tmp, "node-1.new.pem")
	if code, out, errs := waggle("network", "admit", "--dir", netdir, "--renew", cred, "--out", renewed); code != 0 || !strings.Contains(out, "renewed node node-1") {
		t.Fatalf("renew: exit %d\n%s%s", code, out, errs)
	}
	if r, err := admission.Load(renewed); err != nil || r.ID() != c.ID() {
		t.Errorf("renewed credential: %v, %v", r, err)
	}

	for _, args := range [][]string{
		{"network"},
		{"network", "join"},
		{"network", "init"},
		{"network", "admit", "--dir", netdir, "--out", filepath.Join(tmp, "x.pem")},
		{"network", "admit", "--dir", netdir, "--name", "x"},
		{"network", "admit", "--dir", netdir, "--name", "x", "--renew", cred, "--out", filepath.Join(tmp, "x.pem")},
		{"network", "admit", "--dir", netdir, "--name", "x", "--out", filepath.Join(tmp, "x.pem"), "--valid", "-1h"},
	} {
		if code, _, errs := waggle(args...); code != 2 || errs == "" {
			t.Errorf("waggle %v: exit %d, %q; want 2 and an explanation", args, code, errs)
		}
	}
	if code, _, errs := waggle("network", "admit", "--dir", netdir, "--name", "Bad_Name", "--out", filepath.Join(tmp, "x.pem")); code != 1 || !strings.Contains(errs, "node name") {
		t.Errorf("bad name: exit %d, %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(tmp, "x.pem")); err == nil {
		t.Error("a refused admission wrote a file")
	}
}
