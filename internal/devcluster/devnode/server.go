package devnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"
)

// kubeletServer serves the part of the kubelet API that kube-apiserver
// proxies for `kubectl logs`: GET /containerLogs/{namespace}/{pod}/{container}.
// It accepts only TLS clients with a certificate from the plane's CA and an
// allowed common name.
type kubeletServer struct {
	node *Node
	srv  *http.Server
}

func newKubeletServer(n *Node, ln net.Listener) (*kubeletServer, error) {
	pair, err := tls.LoadX509KeyPair(n.opts.ServingCert, n.opts.ServingKey)
	if err != nil {
		return nil, fmt.Errorf("dev node: kubelet serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(n.opts.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("dev node: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("dev node: %s holds no certificate", n.opts.ClientCA)
	}
	s := &kubeletServer{node: n}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	s.srv = &http.Server{
		Handler:           s.authorize(mux),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{pair},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			MinVersion:   tls.VersionTLS12,
		},
	}
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

func (s *kubeletServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}

func (s *kubeletServer) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 ||
			!slices.Contains(s.node.opts.AllowedClients, r.TLS.PeerCertificates[0].Subject.CommonName) {
			http.Error(w, "Forbidden: this client may not use the dev node's kubelet API", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// containerLogs answers like a kubelet: the log of the container's current
// run (or the previous one), optionally the last tailLines lines, at most
// limitBytes bytes, and following new output until the run ends.
func (s *kubeletServer) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, podName, name := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	q := r.URL.Query()
	pw := s.node.worker(ns, podName)
	if pw == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, podName, s.node.opts.Name), http.StatusNotFound)
		return
	}
	var c *container
	for _, candidate := range pw.containers {
		if candidate.spec.Name == name {
			c = candidate
		}
	}
	if c == nil {
		http.Error(w, fmt.Sprintf("container %q in pod %q is not found", name, podName), http.StatusNotFound)
		return
	}
	c.mu.Lock()
	run := c.restartCount
	waiting := c.state.Waiting
	c.mu.Unlock()
	if q.Get("previous") == "true" {
		run--
		if run < 0 {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", name, podName), http.StatusBadRequest)
			return
		}
	}
	f, err := os.Open(c.logPath(run))
	if err != nil {
		reason := "ContainerCreating"
		if waiting != nil {
			reason = waiting.Reason
		}
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: %s", name, podName, reason), http.StatusBadRequest)
		return
	}
	defer f.Close()

	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		if err := seekTail(f, n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	var out io.Writer = w
	if n, err := strconv.ParseInt(q.Get("limitBytes"), 10, 64); err == nil && n > 0 {
		out = &limitWriter{w: w, n: n}
	}
	w.Header().Set("Content-Type", "text/plain")
	follow := q.Get("follow") == "true"
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			continue
		}
		if err != nil && err != io.EOF {
			return
		}
		if !follow || !c.running(run) {
			// One last read: output written just before the process ended.
			if follow {
				follow = false
				continue
			}
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// running reports whether the container's run number run is still going.
func (c *container) running(run int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restartCount != run {
		return false
	}
	return c.state.Running != nil || c.state.Waiting != nil
}

// seekTail positions f at the start of its last n lines.
func seekTail(f *os.File, n int) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	size := info.Size()
	if n == 0 {
		_, err := f.Seek(size, io.SeekStart)
		return err
	}
	const chunk = 8 << 10
	pos := size
	lines := 0
	buf := make([]byte, chunk)
	// A final newline ends the last line; it does not start a new one.
	skipLast := true
	for pos > 0 {
		read := int64(chunk)
		if pos < read {
			read = pos
		}
		pos -= read
		if _, err := f.ReadAt(buf[:read], pos); err != nil && err != io.EOF {
			return err
		}
		for i := read - 1; i >= 0; i-- {
			if buf[i] != '\n' {
				skipLast = false
				continue
			}
			if skipLast {
				skipLast = false
				continue
			}
			lines++
			if lines == n {
				_, err := f.Seek(pos+i+1, io.SeekStart)
				return err
			}
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

// limitWriter writes at most n bytes, then fails.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.ErrShortWrite
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	if err == nil && l.n <= 0 {
		err = io.ErrShortWrite
	}
	return n, err
}
