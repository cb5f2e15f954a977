package redact

import "strings"

// URL returns urls (one URL or a comma-separated list, as NATS clients
// take them) with the password of each replaced by xxxxx, and a user name
// standing alone (a token, nats://TOKEN@host) replaced whole: every NATS
// or OTLP URL leased prints, logs or publishes goes through it (nats.go's
// ConnectedUrlRedacted hides only a password, and a service's INFO
// published a token whole; found by an outside client).
func URL(urls string) string {
	return replaceUserinfo(urls, hidePassword)
}

// OneURL is [URL] for a single URL, in which a comma is no separator: an
// OTLP endpoint's password may hold one (userinfo allows it unescaped),
// and split there its part before the comma was printed as a URL of its
// own, with no "@", whole.
func OneURL(u string) string { return replaceOne(u, hidePassword) }

// hidePassword is userinfo's replacement in URL: the user alone is kept.
func hidePassword(userinfo string) string {
	if user, _, ok := strings.Cut(userinfo, ":"); ok {
		return user + ":xxxxx@"
	}
	return "xxxxx@"
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
		parts[i] = replaceOne(p, by)
	}
	return strings.Join(parts, ",")
}

// replaceOne is replaceUserinfo for the one URL u.
func replaceOne(u string, by func(userinfo string) string) string {
	at := strings.LastIndexByte(u, '@')
	if at < 0 {
		return u
	}
	start := 0
	if j := strings.Index(u, "://"); j >= 0 && j < at {
		start = j + len("://")
	}
	return u[:start] + by(u[start:at]) + u[at+1:]
}
