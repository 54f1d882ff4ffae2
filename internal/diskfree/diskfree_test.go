package diskfree

import (
	"runtime"
	"testing"
)

func TestAvailable(t *testing.T) {
	free, ok := Available(t.TempDir())
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		if ok {
			t.Errorf("Available says %d bytes where it cannot tell", free)
		}
		return
	}
	if !ok || free <= 0 {
		t.Errorf("Available of a temporary directory: %d, %v", free, ok)
	}
	if _, ok := Available("/no/such/directory/here"); ok {
		t.Error("Available of a missing directory says it can tell")
	}
}
