package redact

import "strings"

// URL returns urls (one URL or a comma-separated list, as NATS clients
// take them) with the password of each replaced by xxxxx, and a user name
// standing alone (a token, nats://TOKEN@host) replaced whole: every NATS
// or OTLP URL leased prints, logs or publishes goes through it (nats.go's
// ConnectedUrlRedacted hides only a password, and a service's INFO
// published a token whole; found by an outside client).
func URL(urls string) string {
	return replaceUserinfo(urls, func(userinfo string) string {
		if user, _, ok := strings.Cut(userinfo, ":"); ok {
			return user + ":xxxxx@"
		}
		return "xxxxx@"
	})
}

// WithoutCredentials is urls with no user, password or token in any.
func WithoutCredentials(urls string) string {
	return replaceUserinfo(urls, func(string) string { return "" })
}

// replaceUserinfo replaces the userinfo and its "@" of each of the
// comma-separated urls that has one with what by returns for it.
func replaceUserinfo(urls string, by func(userinfo string) string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		at := strings.LastIndexByte(p, '@')
		if at < 0 {
			continue
		}
		start := 0
		if j := strings.Index(p, "://"); j >= 0 && j < at {
			start = j + len("://")
		}
		parts[i] = p[:start] + by(p[start:at]) + p[at+1:]
	}
	return strings.Join(parts, ",")
}
