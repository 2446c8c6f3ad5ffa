package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// listing is one of the records pages: a state, with a result for a DONE
// one worth listing (a missed notice).
type listing struct {
	Name   string // the page's state= value
	State  driver.State
	Status string
	Title  string
}

var listings = []listing{
	{"FAILED", driver.StateFailed, "", "FAILED"},
	{"IN_PROGRESS", driver.StateInProgress, "", "IN_PROGRESS"},
	{"WAITING", driver.StateWaiting, "", "WAITING (scheduled)"},
	{string(charge.DebitedNotificationFailed), driver.StateDone, string(charge.DebitedNotificationFailed), "notice missed"},
	{"DONE", driver.StateDone, "", "DONE"},
}

// Page sizes of /records: the default, and the cap (a larger one is the cap).
const (
	recordsPageSize = 50
	recordsPageMax  = 200
	maxSearchBytes  = 256
)

// cursor is what /records' after= carries: the listing it belongs to and
// the last key shown, signed with the console's key, so that a forged or
// garbled one is refused (400) rather than read.
type cursor struct {
	State string `json:"s"`
	Q     string `json:"q"`
	Key   string `json:"k"`
}

func (c *Console) cursorMAC(payload []byte) []byte {
	m := hmac.New(sha256.New, c.csrf)
	m.Write([]byte("records-cursor\x00"))
	m.Write(payload)
	return m.Sum(nil)
}

func (c *Console) encodeCursor(k cursor) string {
	b, _ := json.Marshal(k)
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(c.cursorMAC(b))
}

var errCursor = errors.New("the page's cursor (after=) is not one this console made for this list: start from the first page")

func (c *Console) decodeCursor(s, state, q string) (string, error) {
	if len(s) > 4096 {
		return "", errCursor
	}
	p, m, ok := strings.Cut(s, ".")
	if !ok {
		return "", errCursor
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	mac, err2 := base64.RawURLEncoding.DecodeString(m)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, c.cursorMAC(payload)) {
		return "", errCursor
	}
	var k cursor
	if err := json.Unmarshal(payload, &k); err != nil || k.State != state || k.Q != q || k.Key == "" {
		return "", errCursor
	}
	return k.Key, nil
}

// searchProblem says what is wrong with a charge-id prefix ("" nothing).
func searchProblem(q string) string {
	switch {
	case len(q) > maxSearchBytes:
		return "the search is longer than a charge id can be (256 bytes)"
	case !utf8.ValidString(q):
		return "the search is not valid text"
	case strings.IndexFunc(q, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "the search holds a control character"
	}
	return ""
}

type recordsView struct {
	Listings    []listing
	Current     listing
	Q           string
	Limit       int
	Records     []recordFields
	Next        string // the next page's URL, "" on the last
	First       string // the first page's URL, "" on it
	Unsupported string
	// DLQProblem: the DLQ, read for the expired claims listed, could not
	// all be read ("": read, or not needed).
	DLQProblem string
}

// recordsURL is /records for a listing, a search, a size and a cursor.
func recordsURL(state, q string, limit int, after string) string {
	v := url.Values{"state": {state}}
	if q != "" {
		v.Set("q", q)
	}
	if limit != recordsPageSize {
		v.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		v.Set("after", after)
	}
	return "/records?" + v.Encode()
}

// recordsPage lists the records of a state a page at a time, by charge id,
// searched by a charge-id prefix (the store's StateLister).
func (c *Console) recordsPage(w http.ResponseWriter, r *http.Request) {
	bad := func(msg string) {
		c.render(w, r, http.StatusBadRequest, "message", map[string]any{"Title": "Records", "Message": msg, "Link": "/records", "LinkText": "the first page"})
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		bad("the address's query cannot be read (a % not followed by two hex digits)")
		return
	}
	name := q.Get("state")
	if name == "" {
		name = listings[0].Name
	}
	var cur listing
	for _, l := range listings {
		if l.Name == name {
			cur = l
		}
	}
	if cur.Name == "" {
		bad("state: one of FAILED, IN_PROGRESS, DEBITED_NOTIFICATION_FAILED, DONE")
		return
	}
	search := strings.TrimSpace(q.Get("q"))
	if p := searchProblem(search); p != "" {
		bad(p)
		return
	}
	limit := recordsPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			bad("limit: a number of records a page, 1 or more (at most 200 are shown)")
			return
		}
		limit = min(n, recordsPageMax)
	}
	var after string
	if s := q.Get("after"); s != "" {
		var err error
		if after, err = c.decodeCursor(s, cur.Name, search); err != nil {
			bad(err.Error())
			return
		}
	}
	v := recordsView{Listings: listings, Current: cur, Q: search, Limit: limit}
	if after != "" {
		v.First = recordsURL(cur.Name, search, limit, "")
	}
	sl, ok := c.o.Store.(driver.StateLister)
	if !ok {
		v.Unsupported = "this store cannot list records by state; look a charge up by its id"
		c.render(w, r, http.StatusOK, "records", v)
		return
	}
	now := c.o.Now()
	lctx, cancel := context.WithTimeout(r.Context(), c.o.ScanWait) // IN_PROGRESS on DynamoDB: a Scan of the table
	page, err := sl.ListState(lctx, driver.ListRequest{State: cur.State, Status: cur.Status, Prefix: search, After: after, Limit: limit, Now: now})
	timedOut := lctx.Err() == context.DeadlineExceeded && r.Context().Err() == nil
	cancel()
	switch {
	case err != nil && timedOut:
		c.scanTooLong(w, r, "the "+cur.Title+" records", err)
		return
	case errors.Is(err, driver.ErrNotIndexed):
		v.Unsupported = err.Error()
	case err != nil:
		c.backendError(w, r, "list the records", err)
		return
	}
	for _, rec := range page.Records {
		// A tool's own record (the four-eyes settings, a renotify's or a
		// reconciliation's claim: driver.InternalKeyPrefix) is not a
		// charge: not listed, as Stuck does not list one.
		if strings.HasPrefix(rec.Key, driver.InternalKeyPrefix) {
			continue
		}
		v.Records = append(v.Records, recordView(rec, now))
	}
	look := c.lookInDLQ(r.Context(), expiredClaims(v.Records, now))
	c.cockpit(v.Records, now, &look)
	v.DLQProblem = look.Problem
	if page.Next != "" {
		v.Next = recordsURL(cur.Name, search, limit, c.encodeCursor(cursor{State: cur.Name, Q: search, Key: page.Next}))
	}
	c.render(w, r, http.StatusOK, "records", v)
}

// notFound is the console's 404: its own page, with the way back.
func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	if id, ok, _ := c.o.Auth.Identify(r); ok && duplicatedIdentityHeader(c.o.Auth, r) == "" {
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, id))
	}
	c.render(w, r, http.StatusNotFound, "message", map[string]any{"Title": "Not found",
		"Message": "There is no page " + charge.Clip(charge.Printable(r.URL.Path), 200) + " in the console.", "Link": "/", "LinkText": "back to the overview"})
}
