package console

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"time"

	"github.com/dlock-go/dlock"
)

//go:embed assets
var assets embed.FS

var page = template.Must(template.ParseFS(assets, "assets/index.html"))

// routes sets up the console's handlers; every path is relative, so the
// console works under any prefix.
func (c *Console) routes() {
	static, _ := fs.Sub(assets, "assets")
	c.mux = http.NewServeMux()
	c.mux.HandleFunc("GET /{$}", c.index)
	c.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /api/state", c.stateJSON)
	c.mux.HandleFunc("GET /events", c.events)
	c.mux.HandleFunc("POST /api/revoke", c.revoke)
}

// index serves the page with this console's CSRF token: a page of
// another origin cannot read it.
func (c *Console) index(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := page.Execute(&b, map[string]any{"CSRF": c.csrf, "Revoke": c.cfg.Revoke}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	header(w, "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// header sets a response's type and the headers that keep it to itself.
func header(w http.ResponseWriter, typ string) {
	h := w.Header()
	h.Set("Content-Type", typ)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
}

func (c *Console) stateJSON(w http.ResponseWriter, r *http.Request) {
	header(w, "application/json")
	_ = json.NewEncoder(w).Encode(c.view.state())
}

// events streams the state, then its changes, as Server-Sent Events.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	flush := http.NewResponseController(w).Flush
	ch := c.view.subscribe()
	if ch == nil {
		http.Error(w, "console closed", http.StatusServiceUnavailable)
		return
	}
	defer c.view.unsubscribe(ch)
	header(w, "text/event-stream")
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if _, err := w.Write(msg); err != nil {
				return
			}
		case <-ping.C:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
		}
		if flush() != nil {
			return
		}
	}
}

// revokeRequest is what the page posts to api/revoke.
type revokeRequest struct {
	Key    string `json:"key"`
	Holder string `json:"holder"`
	Reason string `json:"reason"`
	Grace  int64  `json:"grace_ms"`
}

// revoke admits a revocation, revokes (Client.Revoke) and answers what it
// did.
func (c *Console) revoke(w http.ResponseWriter, r *http.Request) {
	who, ok := c.admit(w, r)
	if !ok {
		return
	}
	var req revokeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Key == "" || req.Holder == "" {
		fail(w, http.StatusBadRequest, "want a JSON object with key and holder")
		return
	}
	if req.Grace < 0 || req.Grace > dlock.MaxGrace.Milliseconds() { // before it is multiplied: it could wrap
		fail(w, http.StatusBadRequest, fmt.Sprintf("grace_ms must be 0 to %d", dlock.MaxGrace.Milliseconds()))
		return
	}
	// The console's context, not the request's: a page closed, or a proxy
	// that gives up, does not leave a hold marked but never removed.
	grace, bound := time.Duration(req.Grace)*time.Millisecond, dlock.MaxTTL // grace 0: the hold's TTL
	if grace > 0 {
		bound = grace
	}
	ctx, cancel := context.WithTimeout(c.ctx, bound+time.Minute)
	defer cancel()
	got, err := c.cfg.Locks.Revoke(ctx, req.Key, dlock.Revocation{Holder: req.Holder, By: who,
		Reason: req.Reason, Grace: grace})
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		fail(w, http.StatusNotFound, "that hold is gone")
	case errors.Is(err, dlock.ErrInvalidArgument):
		fail(w, http.StatusBadRequest, err.Error())
	case err != nil:
		fail(w, http.StatusBadGateway, err.Error())
	default:
		header(w, "application/json")
		_ = json.NewEncoder(w).Encode(got)
	}
}

// admit checks a mutating request's switch, origin, CSRF token and
// authorization, in that order; it answers a refusal itself, and returns
// who asks.
func (c *Console) admit(w http.ResponseWriter, r *http.Request) (who string, ok bool) {
	switch {
	case !c.cfg.Revoke:
		fail(w, http.StatusForbidden, "revoke is off: this console is read-only")
		return "", false
	case !sameOrigin(r):
		fail(w, http.StatusForbidden, "cross-origin request refused")
		return "", false
	case subtle.ConstantTimeCompare([]byte(r.Header.Get("X-CSRF-Token")), []byte(c.csrf)) != 1:
		fail(w, http.StatusForbidden, "missing or wrong CSRF token: reload the page")
		return "", false
	}
	if who, ok = c.cfg.Authorize(r); !ok {
		if c.cfg.Auth == "basic" {
			w.Header().Set("WWW-Authenticate", `Basic realm="dlock console", charset="UTF-8"`)
		}
		fail(w, http.StatusUnauthorized, "not authorized to revoke")
	}
	return who, ok
}

// sameOrigin reports whether a request comes from the console's own
// page: a browser's Sec-Fetch-Site, or else its Origin, says so. A
// request with neither (not a browser's) is let through to the CSRF token.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// fail answers an error as JSON.
func fail(w http.ResponseWriter, code int, msg string) {
	header(w, "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
