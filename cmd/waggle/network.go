package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
)

const networkUsage = `usage: waggle network init --dir NETDIR
       waggle network admit --dir NETDIR --name NAME --out FILE [--valid 8760h]
       waggle network admit --dir NETDIR --renew OLDFILE --out FILE [--valid 8760h]`

func runNetwork(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, networkUsage)
		return errUsage
	}
	switch args[0] {
	case "init":
		return networkInit(args[1:], stdout, stderr)
	case "admit":
		return networkAdmit(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "waggle network: unknown subcommand %q\n%s\n", args[0], networkUsage)
	return errUsage
}

func networkInit(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("network init", "--dir NETDIR", stderr)
	dir := fs.String("dir", "", "directory for the network's admission key (created; must not hold a network)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if *dir == "" {
		return fmt.Errorf("%w: --dir NETDIR is required", errUsage)
	}
	if err := admission.Init(*dir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, `created a network in %s:
  ca.crt      the network's certificate (public)
  ca.key      the admission key: whoever holds it can admit nodes; keep it private
  gossip.key  the gossip encryption key (secret)
Admit a node with: waggle network admit --dir %s --name NAME --out NAME.pem
`, *dir, *dir)
	return nil
}

func networkAdmit(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("network admit", "--dir NETDIR --name NAME --out FILE [flags]", stderr)
	dir := fs.String("dir", "", "the network's directory, made by waggle network init (required)")
	name := fs.String("name", "", "the node's name: 1-63 lower-case letters, digits and hyphens")
	out := fs.String("out", "", "credential file to write, mode 0600; must not exist (required)")
	valid := fs.Duration("valid", admission.DefaultValidity, "how long the credential is valid")
	renew := fs.String("renew", "", "renew this credential file instead: same name and node ID, new expiry")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	case *dir == "":
		return fmt.Errorf("%w: --dir NETDIR is required", errUsage)
	case *out == "":
		return fmt.Errorf("%w: --out FILE is required", errUsage)
	case *name == "" && *renew == "":
		return fmt.Errorf("%w: --name NAME is required", errUsage)
	case *name != "" && *renew != "":
		return fmt.Errorf("%w: --renew keeps the credential's name; --name cannot be given with it", errUsage)
	case *valid <= 0:
		return fmt.Errorf("%w: --valid must be positive", errUsage)
	}
	// Checked before issuing, so that no credential is recorded as issued
	// and then thrown away. WriteFile checks again, atomically.
	if _, err := os.Lstat(*out); err == nil {
		return fmt.Errorf("%s exists; remove it or choose another --out", *out)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var c admission.Credential
	headline := "admitted node %s to network %s\n"
	if *renew != "" {
		c, err = admission.Renew(*dir, *renew, *valid)
		headline = "renewed node %s of network %s\n"
	} else {
		c, err = admission.Admit(*dir, *name, *valid)
	}
	if err != nil {
		return err
	}
	if err := c.WriteFile(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, headline, c.Name(), c.Network())
	fmt.Fprintf(stdout, `  credential:  %s (secret: give it to the node as --network %s)
  node ID:     %s
  valid until: %s
`, *out, *out, c.ID(), c.NotAfter().UTC().Format(time.RFC3339))
	return nil
}
