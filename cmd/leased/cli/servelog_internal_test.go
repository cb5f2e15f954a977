package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/leased/leased/grantor/embedded"
)

// With --log-format json every line serve writes is a JSON object, its
// last too, which says why it stopped (here: another server holds the
// data directory). That one was text (found by an outside client), and
// so was the usage line of a bad flag.
func TestServeLogsItsErrorAsJSON(t *testing.T) {
	dir := t.TempDir()
	holder, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Shutdown()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--data", dir, "--log-format", "json"}, "locked"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--data", dir, "--log-format", "json", "--sync", "never"}, "--sync"},
	} {
		var stderr bytes.Buffer
		if code := Main(context.Background(), c.args, &bytes.Buffer{}, &stderr); code == ExitOK {
			t.Fatalf("%v: exit 0", c.args)
		}
		found := false
		for l := range strings.Lines(stderr.String()) {
			var line struct{ Msg string }
			if err := json.Unmarshal([]byte(l), &line); err != nil || line.Msg == "" {
				t.Errorf("%v: line %q is no JSON object with a msg", c.args, l)
			}
			found = found || strings.Contains(line.Msg, c.want)
		}
		if !found {
			t.Errorf("%v: no line says %q: %s", c.args, c.want, stderr.String())
		}
	}
}
