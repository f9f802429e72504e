package archive

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/opkit-dev/opkit/internal/archive/pgtest"
)

// TestPendingDeliveriesCommitDurablyWhateverTheDatabaseSays: the
// statement RecordDelivery runs before a Pending delivery's insert turns
// synchronous_commit on where the database has it off (the test server
// does), and leaves the settings that flush the commit's WAL already.
func TestPendingDeliveriesCommitDurablyWhateverTheDatabaseSays(t *testing.T) {
	conn, err := pgx.Connect(t.Context(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(t.Context()) }()
	for _, c := range []struct{ session, want string }{
		{"", "on"}, // the server's: off
		{"off", "on"},
		{"local", "local"},
		{"remote_write", "remote_write"},
		{"remote_apply", "remote_apply"},
	} {
		var got string
		err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
			if c.session != "" {
				if _, err := tx.Exec(t.Context(), `SELECT set_config('synchronous_commit', $1, true)`, c.session); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(t.Context(), pgDurableCommitSQL); err != nil {
				return err
			}
			return tx.QueryRow(t.Context(), `SELECT current_setting('synchronous_commit')`).Scan(&got)
		})
		if err != nil || got != c.want {
			t.Errorf("synchronous_commit %q: %q in the delivery's transaction (%v), want %q", c.session, got, err, c.want)
		}
	}
}
