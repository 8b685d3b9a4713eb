package analytics

import (
	"os"
	"strings"
	"testing"
)

// The README's example is examples/track/main.go word for word, so the
// example in the README always compiles (go vet ./... builds it).
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("examples/track/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(program)+"```\n") {
		t.Error("README.md's example differs from examples/track/main.go")
	}
}
