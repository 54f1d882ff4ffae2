// Package diskfree tells how much space a filesystem has free, for the
// checks that keep a full disk from failing a write halfway: opening the
// database, spooling a large payload.
package diskfree
