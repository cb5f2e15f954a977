package api

import "encoding/json"

// PageOverhead is what a paged reply (a list's, a discovery's) carries
// besides its items, and more: the JSON around them and the reply's
// headers (server time, node name).
const PageOverhead = 1024

// Page encodes the items of one reply whose message may be maxPayload
// bytes, items being those after the request's After, in order. With
// limit > 0 it takes at most limit of them, fewer if more would not fit
// (but always one), and more says whether any were left out. With limit 0
// it takes them all, or returns tooLarge(len(items)) as soon as they
// cannot fit: refused as the page fills up, not once all of it is
// encoded (whole lists of a large bucket, a few at once, took a node's
// memory to 1.5 GB; found by an outside client).
func Page[T any](items []T, limit int, maxPayload int64, encode func(T) ([]byte, error), tooLarge func(n int) error) (page []json.RawMessage, more bool, err error) {
	page = []json.RawMessage{}
	budget := int(maxPayload) - PageOverhead
	for i, it := range items {
		b, err := encode(it)
		if err != nil {
			return nil, false, err
		}
		if limit == 0 && budget-len(b)-1 < 0 {
			return nil, false, tooLarge(len(items))
		}
		if limit > 0 && (i == limit || budget-len(b)-1 < 0 && i > 0) {
			return page, true, nil
		}
		budget -= len(b) + 1
		page = append(page, b)
	}
	return page, false, nil
}
