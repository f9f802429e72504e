package ociimage_test

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/opkit-dev/opkit/internal/ociimage"
)

// commitTime stands for SOURCE_DATE_EPOCH.
var commitTime = time.Date(2026, 11, 3, 14, 5, 9, 0, time.UTC)

// fakeOptions are two platforms' "binaries": the image never runs them,
// so any bytes do, and a different content per platform shows that each
// image has its own.
func fakeOptions() ociimage.Options {
	return ociimage.Options{
		Binaries: []ociimage.Binary{
			// Out of order on purpose: the index sorts them.
			{Platform: "linux/arm64", Data: []byte("\x7fELF not really opkit, for arm64\n")},
			{Platform: "linux/amd64", Data: []byte("\x7fELF not really opkit, for amd64\n")},
		},
		Created:  commitTime,
		Source:   "https://github.com/opkit-dev/opkit",
		Revision: "051bafa0e3c1f0c3b0d3a4e6b1f0a6c2d9e8f7a1",
		Version:  "051bafa",
	}
}

// buildArchive builds opts and writes the layout and its tar under a new
// directory, and returns the tar's bytes.
func buildArchive(t *testing.T, opts ociimage.Options) []byte {
	t.Helper()
	idx, err := ociimage.Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "opkit-image")
	if err := ociimage.WriteLayout(dir, idx, "latest"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ociimage.WriteArchive(&buf, dir, opts.Created); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSameBinariesAndCommitTimeGiveTheSameDigestAndArchive(t *testing.T) {
	first, err := ociimage.Build(fakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	second, err := ociimage.Build(fakeOptions()) // new slices, same bytes
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digest(t, first), digest(t, second); a != b {
		t.Errorf("two builds of the same binaries: index %s, then %s", a, b)
	}
	if a, b := buildArchive(t, fakeOptions()), buildArchive(t, fakeOptions()); !bytes.Equal(a, b) {
		t.Errorf("two builds of the same binaries wrote different archives (%d and %d bytes)", len(a), len(b))
	}

	// And the digest does depend on what goes in.
	changed := fakeOptions()
	changed.Binaries[0].Data = []byte("another binary")
	if other, err := ociimage.Build(changed); err != nil {
		t.Fatal(err)
	} else if digest(t, other) == digest(t, first) {
		t.Error("another binary gave the same digest")
	}
	later := fakeOptions()
	later.Created = commitTime.Add(time.Second)
	if other, err := ociimage.Build(later); err != nil {
		t.Fatal(err)
	} else if digest(t, other) == digest(t, first) {
		t.Error("another commit time gave the same digest")
	}
}

// TestImageRunsTheGivenBinaryAsNonRootWithNothingElse reads the image back
// from the archive, as skopeo would, and checks every platform's config
// and every file of every layer.
func TestImageRunsTheGivenBinaryAsNonRootWithNothingElse(t *testing.T) {
	opts := fakeOptions()
	idx := readArchive(t, buildArchive(t, opts))
	if err := validate.Index(idx); err != nil {
		t.Fatalf("the index read back is not valid: %v", err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range manifest.Manifests {
		platforms = append(platforms, desc.Platform.String())
		if desc.ArtifactType != "" {
			t.Errorf("%s is listed with artifactType %q: an image has none, and tools that predate it drop it, changing the digest", desc.Platform, desc.ArtifactType)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Fatalf("index lists platforms %v, want %v", platforms, want)
	}
	wantLabels := map[string]string{
		ociimage.LabelSource:   opts.Source,
		ociimage.LabelRevision: opts.Revision,
		ociimage.LabelVersion:  opts.Version,
	}
	if !maps.Equal(manifest.Annotations, wantLabels) {
		t.Errorf("index annotations %v, want %v", manifest.Annotations, wantLabels)
	}

	var baseLayers []v1.Hash
	for _, desc := range manifest.Manifests {
		t.Run(desc.Platform.String(), func(t *testing.T) {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.OS != desc.Platform.OS || cfg.Architecture != desc.Platform.Architecture {
				t.Errorf("config says %s/%s, index says %s", cfg.OS, cfg.Architecture, desc.Platform)
			}
			c := cfg.Config
			if c.User != "65532:65532" {
				t.Errorf("User %q, want 65532:65532", c.User)
			}
			if !slices.Equal(c.Entrypoint, []string{"/opkit"}) || len(c.Cmd) != 0 {
				t.Errorf("Entrypoint %q, Cmd %q; want [/opkit] and none", c.Entrypoint, c.Cmd)
			}
			if c.WorkingDir != "/home/nonroot" {
				t.Errorf("WorkingDir %q, want /home/nonroot", c.WorkingDir)
			}
			for _, env := range []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOME=/home/nonroot"} {
				if !slices.Contains(c.Env, env) {
					t.Errorf("Env %q lacks %s", c.Env, env)
				}
			}
			if !maps.Equal(c.Labels, wantLabels) {
				t.Errorf("Labels %v, want %v", c.Labels, wantLabels)
			}
			if !cfg.Created.Time.Equal(commitTime) {
				t.Errorf("created %s, want the commit's time %s", cfg.Created.Time, commitTime)
			}

			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			base, err := layers[0].Digest()
			if err != nil {
				t.Fatal(err)
			}
			baseLayers = append(baseLayers, base)
			files := map[string]*entry{}
			var names []string
			for i, l := range layers {
				for _, e := range layerEntries(t, l) {
					if files[e.Name] != nil {
						t.Errorf("layer %d: %s is in an earlier layer too", i, e.Name)
					}
					if !e.ModTime.Equal(commitTime) {
						t.Errorf("layer %d: %s dated %s, want the commit's time", i, e.Name, e.ModTime)
					}
					files[e.Name] = e
					names = append(names, e.Name)
				}
			}
			want := []string{
				"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/",
				"etc/ssl/certs/ca-certificates.crt", "home/", "home/nonroot/", "tmp/",
				"opkit",
			}
			if !slices.Equal(names, want) {
				t.Errorf("the image holds\n  %q\nwant exactly\n  %q", names, want)
			}
			for _, name := range names {
				switch path.Base(strings.TrimSuffix(name, "/")) {
				case "sh", "bash", "dash", "ash", "zsh", "ksh", "busybox", "toybox":
					t.Errorf("the image has a shell: %s", name)
				}
			}

			var given []byte
			for _, b := range opts.Binaries {
				if b.Platform == desc.Platform.String() {
					given = b.Data
				}
			}
			if bin := files["opkit"]; bin == nil {
				t.Error("no /opkit")
			} else {
				if !bytes.Equal(bin.data, given) {
					t.Errorf("/opkit is %q, not the binary given for %s (%q)", bin.data, desc.Platform, given)
				}
				if bin.Mode != 0o755 || bin.Uid != 0 || bin.Gid != 0 {
					t.Errorf("/opkit mode %o owner %d:%d, want 755 0:0 (the user cannot change it)", bin.Mode, bin.Uid, bin.Gid)
				}
			}
			if home := files["home/nonroot/"]; home != nil && (home.Uid != 65532 || home.Gid != 65532) {
				t.Errorf("/home/nonroot owned by %d:%d, want 65532:65532", home.Uid, home.Gid)
			}
			if tmp := files["tmp/"]; tmp != nil && tmp.Mode != 0o1777 {
				t.Errorf("/tmp mode %o, want 1777", tmp.Mode)
			}
			if passwd := files["etc/passwd"]; passwd != nil &&
				!strings.Contains(string(passwd.data), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:") {
				t.Errorf("/etc/passwd does not name user 65532:\n%s", passwd.data)
			}
			if group := files["etc/group"]; group != nil && !strings.Contains(string(group.data), "\nnonroot:x:65532:") {
				t.Errorf("/etc/group does not name group 65532:\n%s", group.data)
			}
			if ca := files["etc/ssl/certs/ca-certificates.crt"]; ca != nil {
				if !bytes.Equal(ca.data, ociimage.NSSRoots()) {
					t.Error("the CA bundle is not NSSRoots()")
				}
			}
		})
	}
	if len(baseLayers) == 2 && baseLayers[0] != baseLayers[1] {
		t.Errorf("the platforms' base layers differ (%s, %s): the same files should be one blob", baseLayers[0], baseLayers[1])
	}
}

func TestNSSRootsAreParseableUnconstrainedCertificates(t *testing.T) {
	rest := ociimage.NSSRoots()
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Errorf("certificate %d: %v", n, err)
		}
		n++
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		t.Errorf("%d bytes after the last certificate", len(rest))
	}
	// NSS has had some 140 roots for years; a handful would mean the
	// bundle was read wrongly.
	if n < 100 {
		t.Errorf("%d certificates, want the NSS store's 100 or more", n)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ociimage.NSSRoots()) {
		t.Error("crypto/x509 reads no certificate from the bundle")
	}
}

func TestBuildRefusesWhatCannotBeAnImage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		binaries []ociimage.Binary
		want     string
	}{
		{"no binary", nil, "no binary given"},
		{"a platform twice", []ociimage.Binary{{"linux/amd64", []byte("a")}, {"linux/amd64", []byte("b")}}, `"linux/amd64" given twice`},
		{"no architecture", []ociimage.Binary{{"linux", []byte("a")}}, `platform "linux": want OS/ARCH`},
		{"an empty binary", []ociimage.Binary{{"linux/amd64", nil}}, "linux/amd64: the binary is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ociimage.Build(ociimage.Options{Binaries: tc.binaries})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestWriteLayoutReplacesAnEarlierBuild(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "opkit-image")
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "blobs", "sha256", strings.Repeat("0", 64))
	if err := os.WriteFile(stale, []byte("an earlier build's blob"), 0o644); err != nil {
		t.Fatal(err)
	}
	idx, err := ociimage.Build(fakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteLayout(dir, idx, "latest"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an earlier build's blob is still there (%v)", err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != digest(t, idx) ||
		m.Manifests[0].Annotations[ociimage.RefNameAnnotation] != "latest" {
		t.Errorf("index.json lists %+v, want the one index %s named latest", m.Manifests, digest(t, idx))
	}
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// readArchive unpacks an oci-archive and returns the index it names.
func readArchive(t *testing.T, archive []byte) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, 0o644)
			}
		default:
			t.Fatalf("archive entry %s of type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index.json lists %d entries, want 1", len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

type entry struct {
	*tar.Header
	data []byte
}

func layerEntries(t *testing.T, l v1.Layer) []*entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var entries []*entry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, &entry{h, data})
	}
}
