// Package pgtest starts real, throwaway PostgreSQL servers for tests: the
// PostgreSQL archive's conformance suite and whatever else must run
// against one.
//
// Flow. [Main] wraps a test binary's TestMain; the first test that asks
// for a database ([DSN]) starts the binary's shared server, and Main
// stops it and removes its files when the tests end. Each test gets a
// database of its own, dropped when it ends. A test that stops and starts
// its server starts one of its own with [Start].
//
// A server is Debian's postgresql (the newest under
// /usr/lib/postgresql/*/bin, or the one in $OPKIT_POSTGRES_BIN, or initdb
// and postgres on $PATH), initialised by initdb in a new temporary
// directory and listening on a Unix socket in that directory only, with
// no TCP port. PostgreSQL refuses to run as root: as root, initdb and the
// server run as the user nobody (the directory is given to it), set on
// the processes by the kernel's credentials, with no su, sudo or shell;
// as anyone else, as that user. The server is started directly, not
// through pg_ctl, which would start it through /bin/sh: no argument is
// ever passed through a shell, and the test binary holds the server's
// process, which dies with it.
//
// initdb makes ICU's en-US the databases' collation when the server has
// ICU, so that a query that relies on the default collation to sort by bytes
// fails in tests as it would on a real database.
//
// The server runs with synchronous_commit off, as a database tuned for
// speed may: a commit waits for no disk flush unless its transaction asks
// for one, as the archive's Pending deliveries do. fsync stays on, so that
// what the archive asks for is done.
//
// Assumptions and caveats. A server that cannot start (PostgreSQL not
// installed, no user nobody) skips the tests that need it with the reason,
// and fails them when CI=true: CI must run them. `make postgresql`
// installs Debian's package. A test binary killed before Main's end
// leaves its server's directory behind ($TMPDIR/opkit-pgtest-*); the
// server itself dies with the binary.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a PostgreSQL server in a temporary directory.
type Server struct {
	bin  string // the directory of initdb and postgres
	dir  string // the temporary directory: data/, the socket, server.log
	cred *syscall.Credential

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{} // closed when proc exits

	databases atomic.Int64
}

// superuser is the role initdb makes, which the tests connect as; trusted
// on the server's socket.
const superuser = "postgres"

// port names the socket file (.s.PGSQL.5432); nothing listens on TCP.
const port = "5432"

// Start initialises a server in a new temporary directory and starts it.
// Close stops it and removes the directory.
func Start() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = nobody(); err != nil {
			return nil, err
		}
	}
	if s.dir, err = os.MkdirTemp("", "opkit-pgtest-"); err != nil {
		return nil, err
	}
	if err := s.init(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	if err := s.Start(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

// findBin returns the directory of PostgreSQL's initdb and postgres.
func findBin() (string, error) {
	if dir := os.Getenv("OPKIT_POSTGRES_BIN"); dir != "" {
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(found, func(a, b string) int { return version(a) - version(b) })
	if len(found) > 0 {
		return filepath.Dir(found[len(found)-1]), nil
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(initdb), nil
	}
	return "", errors.New("PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/initdb, no initdb on $PATH, and $OPKIT_POSTGRES_BIN is not set (make postgresql installs Debian's package)")
}

// version is the major version in a path /usr/lib/postgresql/VERSION/bin.
func version(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// nobody returns the credentials of the user nobody, for a server started
// by root.
func nobody() (*syscall.Credential, error) {
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root, and there is no user nobody to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user nobody: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func (s *Server) data() string    { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "server.log") }

// command is a PostgreSQL program, run as the server's user in its
// directory, its output to the server's log.
func (s *Server) command(program string, args ...string) (*exec.Cmd, *os.File, error) {
	log, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(filepath.Join(s.bin, program), args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	// Variables of another server (PGDATA, PGPORT...) stay out.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	cmd.Env = append(cmd.Env, "LC_ALL=C.UTF-8")
	// The server dies with the test binary, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	return cmd, log, nil
}

// init runs initdb, then writes the server's settings.
func (s *Server) init() error {
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	// Others may reach the socket in it, not list it.
	if err := os.Chmod(s.dir, 0o711); err != nil {
		return err
	}
	args := []string{"-D", s.data(), "-U", superuser, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"}
	// Databases collate with ICU's en-US if this PostgreSQL has ICU.
	err := s.run("initdb", append(args, "--locale-provider=icu", "--icu-locale=en-US")...)
	if err != nil {
		_ = os.RemoveAll(s.data())
		err = s.run("initdb", args...)
	}
	if err != nil {
		return fmt.Errorf("initdb: %w%s", err, s.logTail())
	}
	settings := fmt.Sprintf(`
listen_addresses = ''
unix_socket_directories = '%s'
port = %s
max_connections = 300
fsync = on
synchronous_commit = off
full_page_writes = on
log_min_messages = warning
`, strings.ReplaceAll(s.dir, "'", "''"), port)
	// The superuser is trusted on the socket; other roles give their
	// password, so that tests can connect with one.
	hba := "local all " + superuser + " trust\nlocal all all scram-sha-256\n"
	conf, err := os.OpenFile(filepath.Join(s.data(), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = conf.WriteString(settings)
	if err := errors.Join(err, conf.Close()); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.data(), "pg_hba.conf"), []byte(hba), 0o600)
}

// run runs a PostgreSQL program to its end.
func (s *Server) run(program string, args ...string) error {
	cmd, log, err := s.command(program, args...)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	return cmd.Run()
}

// Start starts the server (again, after Stop) and waits until it accepts
// connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("pgtest: the server is running")
	}
	cmd, log, err := s.command("postgres", "-D", s.data())
	if err != nil {
		return err
	}
	err = cmd.Start()
	_ = log.Close() // the server has its own copy
	if err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.proc, s.done = cmd, done
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-done:
			s.proc = nil
			return fmt.Errorf("postgres exited at start%s", s.logTail())
		case <-ctx.Done():
			_ = s.stop()
			return fmt.Errorf("postgres did not accept connections within a minute (%w)%s", err, s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the server (a fast shutdown: connections are ended), keeping
// its data for Start.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	return s.stop()
}

// stop ends the server's process; the caller holds s.mu.
func (s *Server) stop() error {
	proc, done := s.proc, s.done
	s.proc = nil
	_ = proc.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
	}
	_ = proc.Process.Signal(syscall.SIGQUIT) // immediate shutdown
	select {
	case <-done:
		return errors.New("postgres did not shut down within 30s: ended at once")
	case <-time.After(10 * time.Second):
		_ = proc.Process.Kill()
		<-done
		return errors.New("postgres did not shut down: killed")
	}
}

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	err := s.Stop()
	return errors.Join(err, os.RemoveAll(s.dir))
}

// DSN returns the URL of a database of the server, for its superuser.
func (s *Server) DSN(database string) string {
	return s.DSNFor(superuser, "", database)
}

// DSNFor returns the URL of a database of the server for a role, with its
// password if not empty.
func (s *Server) DSNFor(role, password, database string) string {
	u := "postgres://" + role
	if password != "" {
		u += ":" + password
	}
	return u + "@/" + database + "?host=" + s.dir + "&port=" + port + "&sslmode=disable"
}

// Exec runs statements as the superuser in a database of the server.
func (s *Server) Exec(ctx context.Context, database string, statements ...string) error {
	conn, err := pgx.Connect(ctx, s.DSN(database))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	for _, q := range statements {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// NewDatabase creates an empty database and returns its URL; it is
// dropped when t ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("opkit_test_%d", s.databases.Add(1))
	if err := s.Exec(context.Background(), "postgres", "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating a test database: %v", err)
	}
	t.Cleanup(func() {
		// The server may have been stopped by the test: then there is
		// nothing to drop until Close removes it all.
		_ = s.Exec(context.Background(), "postgres", "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s.DSN(name)
}

// logTail is the end of the server's log, for an error.
func (s *Server) logTail() string {
	data, err := os.ReadFile(s.logPath())
	if err != nil || len(data) == 0 {
		return ""
	}
	const tail = 2000
	if len(data) > tail {
		data = data[len(data)-tail:]
	}
	return "; the end of its log " + s.logPath() + ":\n" + string(data)
}

// The test binary's shared server, started by the first test that needs
// it.
var shared struct {
	once   sync.Once
	server *Server
	err    error
}

// Main runs a test binary's tests (call it from TestMain), then stops
// the shared server, if a test started it, and removes its files.
func Main(m *testing.M) {
	code := m.Run()
	if shared.server != nil {
		if err := shared.server.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	os.Exit(code)
}

// Shared returns the test binary's shared server, starting it the first
// time. A test that cannot have one is skipped, or fails under CI=true.
// The test binary's TestMain must call Main.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() { shared.server, shared.err = Start() })
	if shared.err != nil {
		Unavailable(t, shared.err)
	}
	return shared.server
}

// DSN returns the URL of a new, empty database of the shared server,
// dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	return Shared(t).NewDatabase(t)
}

// Own starts a server for t alone (one it may stop and start), closed
// when t ends. A test that cannot have one is skipped, or fails under
// CI=true.
func Own(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Unavailable skips t for want of a PostgreSQL server, or fails it under
// CI=true, where the tests must run.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("PostgreSQL could not start, and under CI=true the tests that need it fail rather than skip: %v", err)
	}
	t.Skipf("skipped: PostgreSQL could not start (%v); make postgresql installs it", err)
}
