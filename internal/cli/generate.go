package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opkit-dev/opkit/internal/manifests"
	"github.com/opkit-dev/opkit/internal/typegen"
)

func newGenerateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Generate what installs the engine in a cluster (manifests, the Helm chart's values), or the types handlers are written with",
	}
	cmd.AddCommand(newGenerateManifestsCommand(), newGenerateValuesCommand(), newGenerateTypesCommand())
	return cmd
}

// generateFlags are the options of generate manifests and values.
type generateFlags struct {
	files []string
	opts  manifests.Options
}

func (f *generateFlags) register(cmd *cobra.Command) {
	o := &f.opts
	cmd.Flags().StringArrayVarP(&f.files, "file", "f", nil, "an Operator definition (YAML, several documents allowed); repeatable")
	cmd.Flags().StringVar(&o.Namespace, "namespace", manifests.DefaultNamespace, "the engine's namespace")
	cmd.Flags().StringVar(&o.Name, "name", manifests.DefaultName, "the name of the engine's objects (its ClusterRole is NAMESPACE:NAME)")
	cmd.Flags().StringVar(&o.Image, "image", "", imageHelp(version()))
	cmd.Flags().Int32Var(&o.Replicas, "replicas", 1, "replicas of the engine; more than one elect a leader (--leader-elect) and need --archive-secret")
	cmd.Flags().BoolVar(&o.LeaderElection, "leader-elect", false, "run with leader election even with one replica (always with more)")
	cmd.Flags().StringVar(&o.ArchiveSecret, "archive-secret", "", "a Secret in the engine's namespace whose key "+manifests.ArchiveKey+" is the archive's PostgreSQL URL (default: SQLite on the PersistentVolumeClaim NAME-archive, kept across upgrades)")
	cmd.Flags().StringVar(&o.ArchiveSize, "archive-size", "", "the size of the SQLite archive's PersistentVolumeClaim (default "+manifests.DefaultArchiveSize+"; 0: an emptyDir, lost with the Pod)")
	cmd.Flags().StringVar(&o.ArchiveStorageClass, "archive-storage-class", "", "the storage class of the SQLite archive's PersistentVolumeClaim (default: the cluster's default class)")
	cmd.Flags().StringVar(&o.Operators, "operators", manifests.FromCluster, "where the engine reads the definitions: cluster (applied as Operator objects) or files (a ConfigMap mounted in its Pod)")
	cmd.Flags().BoolVar(&o.AdmissionFinalizers, "admission-finalizers", false, "run with --admission-finalizers (a MutatingAdmissionPolicy per operator with delete handlers; Kubernetes 1.36+), and grant it")
	cmd.Flags().BoolVar(&o.MigrateStorage, "migrate-storage", false, "run with --migrate-storage (objects stored at an older version rewritten at the storage version), and grant it")
	cmd.Flags().BoolVar(&o.RunEvents, "run-events", false, "run with --run-events (a HandlerStarted and a HandlerSucceeded Event for every handler run)")
	cmd.Flags().StringVar(&o.Console.Auth, "console-auth", manifests.ConsoleAuthNone, "serve the console: none (no console), token (--console-token-secret) or kubernetes (TokenReview and SubjectAccessReview)")
	cmd.Flags().StringVar(&o.Console.TokenSecret, "console-token-secret", "", "for --console-auth token: a Secret in the engine's namespace whose key "+manifests.TokenKey+" is the console's token")
	cmd.Flags().StringVar(&o.Console.URL, "console-url", "", "the console's public base URL, linked from Events")
	cmd.Flags().BoolVar(&o.RunsAPI, "runs-api", false, "serve the run archive as the aggregated API runs.opkit.dev (kubectl get runs): an APIService, the whole cluster's, its Service, its RBAC and the ClusterRole "+manifests.RunsViewerRole+" (docs/runs-api.md)")
	cmd.Flags().StringVar(&o.Tracing.Endpoint, "otel-endpoint", "", "export the engine's spans (runs, reconciles, deliveries) with OTLP to this URL, http:// or https:// (http://otel-collector.observability:4317): its env OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL and OTEL_SERVICE_NAME="+manifests.TracingService+" (default: none exported; docs/observability.md)")
	cmd.Flags().StringVar(&o.Tracing.Protocol, "otel-protocol", manifests.TracingGRPC, "with --otel-endpoint, the OTLP protocol: "+manifests.TracingGRPC+" (a collector's port 4317) or "+manifests.TracingHTTP+" (4318; the endpoint is the base URL, /v1/traces appended): its env OTEL_EXPORTER_OTLP_PROTOCOL")
	cmd.Flags().StringVar(&o.Tracing.SampleRatio, "otel-sample-ratio", "", "with --otel-endpoint, the share of traces sampled, from 0 to 1 (0.25): its env OTEL_TRACES_SAMPLER=parentbased_traceidratio and OTEL_TRACES_SAMPLER_ARG (default: every trace, unless an incoming trace context was not sampled)")
	cmd.Flags().BoolVar(&o.Hooks, "hooks", false, "expose the hooks port (webhook deliveries) even when no definition has a source")
	cmd.Flags().BoolVar(&o.AllowHostExec, "allow-host-exec", false, "warn, instead of refusing, when an exec handler names no exec.image: it runs in the engine's container, so the engine's image (--image) must hold its program")
}

// generate compiles the definitions and computes the manifests, printing
// warnings to stderr.
func (f *generateFlags) generate(cmd *cobra.Command) (*manifests.Manifests, error) {
	if len(f.files) == 0 && f.opts.Operators == manifests.FromFiles {
		return nil, fmt.Errorf("--operators files: give the definitions with -f")
	}
	defs, err := compileFiles(f.files)
	if err != nil {
		return nil, err
	}
	printWarnings(cmd.ErrOrStderr(), defs...)
	f.opts.Version = version()
	if _, release := manifests.ImageTag(f.opts.Version); !release && f.opts.Image == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the engine's image is %s: this opkit, %s, is a development build, whose image is not published; build and push it under that tag (make image, docs/image.md) or give --image\n",
			manifests.DefaultImage(f.opts.Version), f.opts.Version)
	}
	m, err := manifests.New(defs, f.opts)
	if err != nil {
		return nil, err
	}
	for _, w := range m.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	return m, nil
}

// imageHelp is the help of --image: the default image for this opkit's
// version, as the manifests will name it.
func imageHelp(v string) string {
	if _, release := manifests.ImageTag(v); release {
		return "the engine's image, also the runners' agent (default " + manifests.DefaultImage(v) + ", the image of this opkit's version)"
	}
	return "the engine's image, also the runners' agent (default " + manifests.DefaultImage(v) + ": the image of this opkit's version, " +
		manifests.DefaultImageRepository + ":VERSION, never :latest; this one, " + v + ", is a development build, whose image is not published)"
}

func newGenerateManifestsCommand() *cobra.Command {
	f := &generateFlags{}
	var noNamespace bool
	cmd := &cobra.Command{
		Use:   "manifests -f FILE... [flags]",
		Short: "Print the manifests that install the engine for the definitions in FILEs, with least-privilege RBAC",
		Long: `Print, as YAML, what runs the engine in a cluster for the Operators defined
in FILEs: its Namespace, ServiceAccount, RBAC, Deployment, Service,
PodDisruptionBudget (with more than one replica), and the definitions
themselves — applied as Operator objects with their CRD (--operators
cluster, the default), or mounted as files (--operators files).

An operator whose exec handlers name exec.image gets runners: a Deployment
per image, whose Pod gets opkit's agent from the engine's image, the
operator's directory (the definition's, in a ConfigMap of at most 1 MiB)
and a ServiceAccount with no rights. An exec handler without exec.image is
refused, naming it, since the engine's image holds no interpreter; pass
--allow-host-exec to warn instead. Images are pinned to this opkit's
version, never :latest.

The ClusterRole and Roles grant exactly what the engine does for these
definitions, each rule under a comment saying why, and never a wildcard: an
Operator added or changed later may need more, so generate again. See
docs/production.md for what each rule is for.

  opkit generate manifests -f printer.yaml > opkit.yaml
  kubectl apply --server-side -f opkit.yaml   # twice the first time: the
                                               # Operators need their CRD`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.opts.CreateNamespace = !noNamespace
			m, err := f.generate(cmd)
			if err != nil {
				return err
			}
			return m.WriteManifests(cmd.OutOrStdout())
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&noNamespace, "no-namespace", false, "leave the Namespace object out (it exists already)")
	cmd.Flags().BoolVar(&f.opts.DevNode, "dev-node", false, "the engine's and the runners' Pods tolerate the dev node's taint (opkit.dev/dev-node): to rehearse the install on the local control plane of opkit cluster start, which runs them as processes of this host (docs/production.md)")
	return cmd
}

func newGenerateValuesCommand() *cobra.Command {
	f := &generateFlags{}
	cmd := &cobra.Command{
		Use:   "values -f FILE... [flags]",
		Short: "Print the Helm chart's values (RBAC rules included) for the definitions in FILEs",
		Long: `Print the values of the Helm chart deploy/helm/opkit for the Operators
defined in FILEs, the RBAC rules they need included: the chart refuses to
render without rules, and never grants a wildcard. Rendered with these
values, the chart gives the objects of opkit generate manifests with the
same flags (its release's name and namespace are --name and --namespace).

  opkit generate values -f printer.yaml > values.yaml
  helm install opkit deploy/helm/opkit -n opkit --create-namespace -f values.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.generate(cmd)
			if err != nil {
				return err
			}
			return m.WriteValues(cmd.OutOrStdout())
		},
	}
	f.register(cmd)
	return cmd
}

func newGenerateTypesCommand() *cobra.Command {
	var opts typegen.Options
	var output string
	cmd := &cobra.Command{
		Use:   "types -f FILE --lang go|python|typescript [-o FILE] [--package NAME]",
		Short: "Write the types of an operator's objects, and of its handlers' binding contexts and results, in Go, Python or TypeScript",
		Long: `Write, as one source file, the types a handler of the Operators in FILE is
written with, so that its type checker (go vet, pyright, tsc) catches a
field the schema does not have:

- for each version of the custom resource, its object (apiVersion, kind,
  metadata, spec, status), its spec and its status, as the CRD types them:
  required fields are not optional, enums are a type of their values,
  nested objects named types (GreetingSpecOwner), maps and lists of their
  values' types, descriptions and defaults doc comments. The version
  handlers receive (readVersion, or the storage version) has the kind's
  name, Greeting; the others end with their version, GreetingV1alpha1.
- for each handler, its binding context and its result (GreetContext,
  GreetResult for handler greet), on the generic types of the handler
  SDK: package github.com/opkit-dev/opkit/pkg/handler (Go),
  opkit_handler.py (Python), opkit.ts (TypeScript, imported from
  "./opkit.js"). The related objects and children are typed by id.

Names a language cannot spell are made so, and names that collide get a
number: each is said on stderr. The file's first line says how it was
generated; opkit dev DIR regenerates the files beside a definition (in
its directory, or one below) whose first line names it, when it changes.

  opkit generate types -f operator.yaml --lang python -o greetings_types.py
  opkit generate types -f operator.yaml --lang go --package main -o types.go
  opkit generate types -f operator.yaml --lang typescript -o types.ts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("package") && opts.Lang != typegen.Go {
				return fmt.Errorf("--package names a Go package: it is for --lang go only")
			}
			if opts.Lang == "" {
				return fmt.Errorf("--lang is required: %s", strings.Join(typegen.Languages, ", "))
			}
			out, err := typegen.GenerateFile(opts)
			if err != nil {
				return err
			}
			for _, w := range out.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			if output == "" || output == "-" {
				_, err := cmd.OutOrStdout().Write(out.Source)
				return err
			}
			return typegen.WriteFile(output, out.Source)
		},
	}
	cmd.Flags().StringVarP(&opts.File, "file", "f", "", "the Operator definition (YAML, several documents allowed); named in the file's first line as given")
	cmd.Flags().StringVar(&opts.Lang, "lang", "", "the language: "+strings.Join(typegen.Languages, ", "))
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the file here (default: stdout)")
	cmd.Flags().StringVar(&opts.Package, "package", typegen.DefaultPackage, "the Go file's package (--lang go)")
	return cmd
}
