package githubfake

import (
	"net/http"
	"path"
	"sync"
)

// Fault changes the answer to some requests: the moments a client can be
// failed, retried or killed in. Of the requests it matches (Method and
// Path), the first Skip are answered as usual, and the Times after them
// get the fault. A fault with neither Status nor Hang changes nothing.
type Fault struct {
	// Method matches the request's method; empty matches any.
	Method string
	// Path is a path.Match pattern over the request's path, e.g.
	// "/repos/*/*/issues/*/comments"; empty matches any.
	Path string
	// Skip is how many matching requests are answered as usual first.
	Skip int
	// Times is how many matching requests after Skip get the fault.
	// Defaults to 1; negative: every one.
	Times int
	// Status answers the request with this status and a GitHub error
	// body (502 Bad Gateway...), after a hang when Hang is set.
	Status int
	// Apply does what the request asks before the fault (the comment is
	// created) and, without Status, answers as usual after a hang: a
	// response lost on the way, or late.
	Apply bool
	// Hang holds the request until the client goes away (it is then
	// recorded with status 0), Release is called, or the server closes.
	Hang bool
	// Header is set on a Status answer: Retry-After of a secondary rate
	// limit (403 or 429), say.
	Header map[string]string
}

// Injection is a Fault in force. Its methods are safe for concurrent use.
type Injection struct {
	fault   Fault
	seen    int // matching requests, under Server.mu
	applied int // of which got the fault, under Server.mu

	s           *Server
	hit         chan struct{}
	hitOnce     sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

// Inject puts f in force for the requests that come from now on. Faults
// are tried in the order injected; a request gets the first that applies
// to it, and counts for every fault it matches.
func (s *Server) Inject(f Fault) *Injection {
	inj := &Injection{fault: f, s: s, hit: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.faults = append(s.faults, inj)
	s.mu.Unlock()
	return inj
}

// Hit is closed when the fault first applies to a request (a hanging one
// is then held).
func (i *Injection) Hit() <-chan struct{} { return i.hit }

// Hits is how many requests got the fault so far.
func (i *Injection) Hits() int {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	return i.applied
}

// Release lets the requests the fault holds, and the ones it would hold
// from now on, go on.
func (i *Injection) Release() { i.releaseOnce.Do(func() { close(i.release) }) }

// match counts r for every fault it matches and returns the first that
// applies, or nil.
func (s *Server) match(r *http.Request) *Injection {
	s.mu.Lock()
	defer s.mu.Unlock()
	var got *Injection
	for _, inj := range s.faults {
		f := inj.fault
		if f.Method != "" && f.Method != r.Method {
			continue
		}
		if ok, _ := path.Match(f.Path, r.URL.Path); f.Path != "" && !ok {
			continue
		}
		inj.seen++
		times := f.Times
		if times == 0 {
			times = 1
		}
		if got != nil || inj.seen <= f.Skip || (times > 0 && inj.seen > f.Skip+times) {
			continue
		}
		inj.applied++
		inj.hitOnce.Do(func() { close(inj.hit) })
		got = inj
	}
	return got
}
