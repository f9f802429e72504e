package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// RefNameAnnotation names an image in an OCI layout's index.json; skopeo
// selects by it in oci-archive:FILE:NAME.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes idx as an OCI image layout directory at dir, its only
// entry in index.json named refName (none if empty). What was at dir is
// replaced whole, so no blob of an earlier build stays behind; until the
// layout is complete, dir is left as it was.
func WriteLayout(dir string, idx v1.ImageIndex, refName string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp's is 0700
		return fmt.Errorf("ociimage: %w", err)
	}

	add := mutate.IndexAddendum{Add: idx}
	if refName != "" {
		add.Annotations = map[string]string{RefNameAnnotation: refName}
	}
	if _, err := layout.Write(tmp, mutate.AppendManifests(empty.Index, add)); err != nil {
		return fmt.Errorf("ociimage: writing the OCI layout: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	return nil
}

// WriteArchive writes the OCI layout directory dir to w as a tar, the
// form skopeo reads as oci-archive:FILE. Entries are sorted, directories
// 0755 and files 0644, owned by 0:0 and dated mtime (as Options.Created:
// the zero time is the Unix epoch), so the same layout gives the same
// bytes.
func WriteArchive(w io.Writer, dir string, mtime time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ociimage: reading the OCI layout: %w", err)
	}
	slices.Sort(paths)
	mtime = stamp(mtime)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("ociimage: %w", err)
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Format: tar.FormatUSTAR}
		switch {
		case info.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case info.Mode().IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, info.Size()
		default:
			return fmt.Errorf("ociimage: %s: not a file or directory (an OCI layout holds only those)", p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("ociimage: %s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if err := copyFile(tw, p); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("ociimage: %s: %w", path, err)
	}
	return nil
}
