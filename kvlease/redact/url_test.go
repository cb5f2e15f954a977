package redact_test

import (
	"testing"

	"github.com/leased/leased/kvlease/redact"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want, bare string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://leased:pw@127.0.0.1:4222", "nats://leased:xxxxx@127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://s3cr3t-token@h:4222", "nats://xxxxx@h:4222", "nats://h:4222"},
		{"tls://u:p@a:1,nats://b:2,nats://v:q:r@c:3", "tls://u:xxxxx@a:1,nats://b:2,nats://v:xxxxx@c:3", "tls://a:1,nats://b:2,nats://c:3"},
		{"u:p@host:4222", "u:xxxxx@host:4222", "host:4222"},
		{"nats://u:p%40x@h:1", "nats://u:xxxxx@h:1", "nats://h:1"},
		{"https://u:p@collector:4318/v1", "https://u:xxxxx@collector:4318/v1", "https://collector:4318/v1"},
		{"", "", ""},
	} {
		if got := redact.URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := redact.WithoutCredentials(c.in); got != c.bare {
			t.Errorf("WithoutCredentials(%q) = %q, want %q", c.in, got, c.bare)
		}
	}
}

// An OTLP endpoint is one URL: a comma in its password is no separator.
func TestOneURL(t *testing.T) {
	in := "https://u:pa,ss@collector:4318/v1"
	if got, want := redact.OneURL(in), "https://u:xxxxx@collector:4318/v1"; got != want {
		t.Errorf("OneURL(%q) = %q, want %q", in, got, want)
	}
}
