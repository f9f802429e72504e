package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/opkit-dev/opkit/internal/archive"
)

// deliveryOutcomes are the outcomes --outcome takes, in the order a
// delivery goes through them.
var deliveryOutcomes = []archive.DeliveryOutcome{archive.DeliveryPending, archive.DeliveryHandled, archive.DeliveryFailed, archive.DeliveryRefused}

// reasonWidth is how much of a delivery's reason the table shows; opkit
// events show prints it whole.
const reasonWidth = 60

func newEventsCommand() *cobra.Command {
	var archivePath, kubeconfig, output, outcome, since string
	var q archive.DeliveryQuery
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List webhook deliveries, newest first",
		Long: `List the webhook deliveries recorded in the archive, newest first: the
operator and source each came in on, the sender's event and delivery id,
its outcome (Pending, Handled, Failed, Refused) and why it failed or was
refused, and the runs its handling started (the run's id when one, else
how many). Filter by operator, source, outcome or age.

--refused lists every delivery that was turned away: those the source's
checks refused (a bad signature, a replay, filtered out, too large;
outcome Refused) and those a handler refused (outcome Handled, nothing
done, with the handler's reason). --refused --outcome Refused or Handled
keeps one kind.

The table cuts a long reason at 60 characters; -o wide shows it whole.
-o json prints every field but the payload, headers that carry
credentials redacted.

Print one delivery whole, its headers, what it caused and its payload
(secrets redacted), with opkit events show ID; a run's log with opkit logs
RUN.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("opkit events takes no arguments; to print one delivery, opkit events show %s", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if outcome != "" {
				o, err := parseDeliveryOutcome(outcome)
				if err != nil {
					return err
				}
				if q.Refused && o != archive.DeliveryRefused && o != archive.DeliveryHandled {
					return fmt.Errorf("--refused and --outcome %s select nothing together: a refusal is Refused (by the source's checks) or Handled (by a handler); pass one of them", o)
				}
				q.Outcome = o
			}
			if since != "" {
				d, err := time.ParseDuration(since)
				if err != nil || d <= 0 {
					return fmt.Errorf("--since %q: want how far back to look, a duration such as 30m, 6h or 48h", since)
				}
				q.Since = time.Now().Add(-d)
			}
			if output != "table" && output != "wide" && output != "json" {
				return fmt.Errorf("-o %q: want table, wide or json", output)
			}
			src, err := openRunSource(cmd, archivePath, kubeconfig)
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			page, err := src.ListDeliveries(cmd.Context(), q)
			if err != nil {
				return err
			}
			if output == "json" {
				for i := range page.Deliveries {
					page.Deliveries[i].Headers = archive.RedactHeaders(page.Deliveries[i].Headers)
				}
				return writeJSON(cmd.OutOrStdout(), page)
			}
			width := reasonWidth
			if output == "wide" {
				width = 0
			}
			if len(page.Deliveries) == 0 && q.Cursor == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "No deliveries in %s select these flags.\n", src.where())
				return nil
			}
			printDeliveries(cmd.OutOrStdout(), page.Deliveries, time.Now(), width)
			if page.Next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more deliveries: add --cursor %s\n", page.Next)
			}
			return nil
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().StringVar(&q.Operator, "operator", "", "only deliveries to this operator")
	cmd.Flags().StringVar(&q.Source, "source", "", "only deliveries on this event source of the operator (github)")
	cmd.Flags().BoolVar(&q.Refused, "refused", false, "only deliveries turned away, with why: refused by the source's checks (a bad signature, a replay, filtered out, too large) or by a handler")
	cmd.Flags().StringVar(&outcome, "outcome", "", "only deliveries of this outcome: "+joinOutcomes(", "))
	cmd.Flags().StringVar(&since, "since", "", "only deliveries received in this last while, e.g. 30m or 48h")
	cmd.Flags().IntVar(&q.Limit, "limit", 50, "deliveries per page, at most 1000")
	cmd.Flags().StringVar(&q.Cursor, "cursor", "", "continue after a previous page")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, wide (the reason whole) or json")
	cmd.AddCommand(newEventsShowCommand(), newEventsRedeliverCommand())
	return cmd
}

// parseDeliveryOutcome is the outcome named s, in any case.
func parseDeliveryOutcome(s string) (archive.DeliveryOutcome, error) {
	for _, o := range deliveryOutcomes {
		if strings.EqualFold(s, string(o)) {
			return o, nil
		}
	}
	return "", fmt.Errorf("--outcome %q: want one of %s", s, joinOutcomes(", "))
}

func joinOutcomes(sep string) string {
	names := make([]string, len(deliveryOutcomes))
	for i, o := range deliveryOutcomes {
		names[i] = string(o)
	}
	return strings.Join(names, sep)
}

// printDeliveries writes deliveries as a table, their reasons cut at
// reasonWidth characters, or whole for 0. What the sender chose (its
// event, its delivery id, a reason that quotes it) is shown cleaned, as a
// run's log is.
func printDeliveries(w io.Writer, deliveries []archive.Delivery, now time.Time, reasonWidth int) {
	if len(deliveries) == 0 {
		fmt.Fprintln(w, "No deliveries.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOPERATOR\tSOURCE\tEVENT\tDELIVERY\tOUTCOME\tREASON\tRUNS\tAGE")
	for _, d := range deliveries {
		runs := "-"
		switch len(d.Runs) {
		case 0:
		case 1:
			runs = d.Runs[0]
		default:
			runs = fmt.Sprint(len(d.Runs))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Operator, d.Source, orDash(cell(d.Event, 40)),
			orDash(cell(d.DeliveryID, 40)), d.Outcome, orDash(cell(d.Reason, reasonWidth)), runs, duration.HumanDuration(now.Sub(d.ReceivedAt)))
	}
	_ = tw.Flush()
}

// cell is s cleaned for one table cell, on one line, cut to width
// characters; whole for a width of 0.
func cell(s string, width int) string {
	s = archive.CleanLog([]byte(s))
	s = strings.Join(strings.Fields(s), " ")
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-3]) + "..."
}

func newEventsShowCommand() *cobra.Command {
	var archivePath, output string
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print one webhook delivery whole: its headers, what it caused, its payload",
		Long: `Print one webhook delivery as the archive keeps it: its fields, its
headers, what its handling caused (the runs it started, each with the
opkit logs command that prints its log, and the objects it created or
patched) and its payload, indented when it is JSON.

The archive keeps a payload as it was received, for its handling; what is
printed is redacted: the values of JSON members named like a secret
(token, secret, password, signature, api_key...) and token-like text (a
GitHub token, a Bearer credential, a key=value secret) read [redacted], and
so do headers that carry credentials (already redacted when recorded). A
refused delivery keeps only the start of a long payload, marked where it
was cut.

What a sender sent is untrusted: terminal control sequences are stripped
and invalid UTF-8 replaced, as opkit logs does.

-o json prints the delivery's fields, its headers and payload redacted
alike: "payload" is the payload as JSON when it is a whole JSON document,
"payloadText" the payload as text otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if !archive.ValidID(id) {
				return fmt.Errorf("%q is not a delivery id (opkit events lists them)", id)
			}
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			store, err := openExistingArchive(cmd.Context(), archivePath)
			if err != nil {
				return err
			}
			defer func() { _ = store.Close() }()
			d, err := store.GetDelivery(cmd.Context(), id)
			if errors.Is(err, archive.ErrNotFound) {
				if _, runErr := store.Get(cmd.Context(), id); runErr == nil {
					return fmt.Errorf("%s is a run, not a delivery: opkit logs %s prints its log", id, id)
				}
				return fmt.Errorf("delivery %s: %w in %s; opkit events lists the deliveries it keeps", id, archive.ErrNotFound, archive.RedactDSN(archivePath))
			}
			if err != nil {
				return err
			}
			// Recorded redacted by the engine; again, in case an older
			// one did not.
			d.Headers = archive.RedactHeaders(d.Headers)
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), shownDeliveryOf(d))
			}
			// The runs it started, as far as the archive still has them.
			runs := map[string]*archive.Run{}
			for _, runID := range d.Runs {
				r, err := store.Get(cmd.Context(), runID)
				switch {
				case errors.Is(err, archive.ErrNotFound):
				case err != nil:
					return err
				default:
					runs[runID] = r
				}
			}
			printDelivery(cmd.OutOrStdout(), d, runs, time.Now())
			return nil
		},
	}
	archiveFlag(cmd, &archivePath)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// shownDelivery is a delivery as opkit events show -o json prints it:
// its payload redacted, as JSON when it is a whole JSON document within
// opkit's depth limit, else as text with a note when it is too deep (the
// embedded Delivery's Payload, base64, is hidden by these fields).
type shownDelivery struct {
	archive.Delivery
	Payload     json.RawMessage `json:"payload,omitempty"`
	PayloadText *string         `json:"payloadText,omitempty"`
	PayloadNote string          `json:"payloadNote,omitempty"`
}

func shownDeliveryOf(d *archive.Delivery) shownDelivery {
	out := shownDelivery{Delivery: *d}
	if len(d.Payload) == 0 {
		return out
	}
	redacted := archive.RedactPayload(d.Payload)
	tooDeep := archive.TooDeep(redacted)
	if !d.PayloadTruncated && !tooDeep && json.Valid(redacted) {
		out.Payload = redacted
		return out
	}
	if tooDeep {
		out.PayloadNote = "nested too deep to be printed as JSON: given as text"
	}
	text := strings.ToValidUTF8(string(redacted), "\uFFFD")
	out.PayloadText = &text
	return out
}

// printDelivery writes one delivery whole: its fields, headers, what it
// caused (runs holds those of its runs the archive still has) and its
// payload.
func printDelivery(w io.Writer, d *archive.Delivery, runs map[string]*archive.Run, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Delivery:\t%s\n", d.ID)
	fmt.Fprintf(tw, "Operator:\t%s\n", d.Operator)
	fmt.Fprintf(tw, "Source:\t%s\n", d.Source)
	fmt.Fprintf(tw, "Event:\t%s\n", orDash(cell(d.Event, 200)))
	fmt.Fprintf(tw, "Sender's id:\t%s\n", orDash(cell(d.DeliveryID, 200)))
	fmt.Fprintf(tw, "Outcome:\t%s\n", d.Outcome)
	if d.Reason != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", cell(d.Reason, 4096))
	}
	fmt.Fprintf(tw, "Received:\t%s (%s ago)\n", d.ReceivedAt.Local().Format(time.RFC3339), duration.HumanDuration(now.Sub(d.ReceivedAt)))
	if d.RedeliveryOf != "" {
		fmt.Fprintf(tw, "Redelivery of:\t%s, asked by %s%s\n", d.RedeliveryOf, cell(d.RedeliveredBy, 256), orEmpty(": ", cell(d.RedeliveryReason, 1024)))
	}
	if len(d.Redeliveries) > 0 {
		fmt.Fprintf(tw, "Redelivered as:\t%s\n", strings.Join(d.Redeliveries, ", "))
	}
	if !d.HandledAt.IsZero() {
		fmt.Fprintf(tw, "Handled:\t%s (%s after it came)\n", d.HandledAt.Local().Format(time.RFC3339),
			d.HandledAt.Sub(d.ReceivedAt).Round(time.Millisecond))
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	if len(d.Headers) == 0 {
		fmt.Fprintln(w, "Headers: none")
	} else {
		fmt.Fprintln(w, "Headers:")
		names := make([]string, 0, len(d.Headers))
		for name := range d.Headers {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			for _, v := range d.Headers[name] {
				fmt.Fprintf(w, "  %s: %s\n", cell(name, 200), cell(v, 4096))
			}
		}
	}

	fmt.Fprintln(w)
	switch {
	case d.Outcome == archive.DeliveryRefused:
		fmt.Fprintln(w, "Caused: nothing; a refused delivery is never handled")
	case d.Outcome == archive.DeliveryPending && len(d.Runs) == 0:
		fmt.Fprintln(w, "Caused: nothing yet; it is handled when its operator's engine runs")
	case len(d.Runs) == 0 && len(d.Objects) == 0:
		fmt.Fprintln(w, "Caused: no runs, no objects")
	default:
		if d.Outcome == archive.DeliveryPending {
			fmt.Fprintln(w, "Caused so far (it is being handled):")
		} else {
			fmt.Fprintln(w, "Caused:")
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, id := range d.Runs {
			if r, ok := runs[id]; ok {
				fmt.Fprintf(tw, "  run %s\t%s\t%s\t%s\topkit logs %s\n", id, r.Handler, r.Object(), r.Outcome, id)
			} else {
				fmt.Fprintf(tw, "  run %s  no longer in the archive\n", id) // no cells: the others' columns stay narrow
			}
		}
		_ = tw.Flush()
		for _, o := range d.Objects {
			fmt.Fprintf(w, "  %s\n", cell(o, 4096))
		}
	}

	fmt.Fprintln(w)
	printPayload(w, d)
}

// printPayload writes a delivery's payload under a heading that says its
// size, redacted and indented when it is JSON (archive.ShowPayload), and
// marked where the archive cut it.
func printPayload(w io.Writer, d *archive.Delivery) {
	size := max(d.PayloadBytes, int64(len(d.Payload)))
	if size == 0 {
		fmt.Fprintln(w, "Payload: empty")
		return
	}
	text, isJSON, note := archive.ShowPayload(d.Payload)
	kind := ""
	if isJSON {
		kind = "JSON, "
	}
	cut := ""
	if d.PayloadTruncated {
		cut = fmt.Sprintf(", cut at %s", humanSize(int64(len(d.Payload))))
	}
	fmt.Fprintf(w, "Payload (%s%s%s, secrets redacted):\n", kind, humanSize(size), cut)
	fmt.Fprint(w, text)
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(w)
	}
	if d.PayloadTruncated {
		fmt.Fprintf(w, "[opkit: payload cut at %s of %s; the archive keeps a refused payload's start]\n",
			humanSize(int64(len(d.Payload))), humanSize(size))
	}
	if note != "" {
		fmt.Fprintf(w, "[opkit: payload %s]\n", note)
	}
}

// humanSize is archive.HumanBytes without a ".0": 256 KiB, 1.2 MiB.
func humanSize(n int64) string {
	return strings.Replace(archive.HumanBytes(n), ".0 ", " ", 1)
}

// orEmpty is prefix and s, or "" when s is empty.
func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}
