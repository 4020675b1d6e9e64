package stack

import (
	"net/http"
	"strconv"
	"strings"
)

// routesPrefix is where Route mounts handlers on the demo server.
const routesPrefix = "/routes/"

// routes holds the handlers of Route, by number.
type routes struct {
	next     http.Handler // the demo source and sink
	handlers []http.Handler
}

// Route serves h on the demo server under a path of its own and returns
// that path's URL (DemoURL + "/routes/<n>"; h sees the rest of the path).
//
// Workers take a payload's recipients_url only from the origins of
// FANOUT_RECIPIENTS_URL_ALLOW (scheme, host and port equal), and the stack
// lists one: the demo server (DemoURL), whose port is fixed when the
// workers start. A test's recipients endpoint, started later on a port of
// its own, would be refused; routed here it is on the listed origin.
func (s *Stack) Route(h http.Handler) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes.handlers = append(s.routes.handlers, h)
	return s.DemoURL + routesPrefix + strconv.Itoa(len(s.routes.handlers)-1)
}

// RecipientsURLAllow is the stack's FANOUT_RECIPIENTS_URL_ALLOW: the demo
// server, which serves the demo source and every Route.
func (s *Stack) RecipientsURLAllow() string { return s.DemoURL }

func (s *Stack) serveRoutes(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, routesPrefix)
	if !ok {
		s.routes.next.ServeHTTP(w, r)
		return
	}
	num, sub, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(num)
	s.mu.Lock()
	var h http.Handler
	if err == nil && n >= 0 && n < len(s.routes.handlers) {
		h = s.routes.handlers[n]
	}
	s.mu.Unlock()
	if h == nil {
		http.NotFound(w, r)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = "/"+sub, ""
	h.ServeHTTP(w, r2)
}
