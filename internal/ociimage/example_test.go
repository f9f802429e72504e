package ociimage_test

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/opkit-dev/opkit/internal/ociimage"
)

// Build an image for one platform and list its layers as `tar tv` would.
func ExampleBuild() {
	idx, err := ociimage.Build(ociimage.Options{
		Binaries: []ociimage.Binary{{Platform: "linux/amd64", Data: []byte("opkit's bytes")}},
		Created:  time.Unix(1700000000, 0),
		Version:  "v0.1.0",
	})
	if err != nil {
		panic(err)
	}
	m, _ := idx.IndexManifest()
	img, _ := idx.Image(m.Manifests[0].Digest)
	cfg, _ := img.ConfigFile()
	fmt.Println(m.Manifests[0].Platform, "user", cfg.Config.User, "entrypoint", cfg.Config.Entrypoint)
	layers, _ := img.Layers()
	for i, l := range layers {
		fmt.Printf("layer %d:\n", i)
		rc, _ := l.Uncompressed()
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			size := fmt.Sprint(h.Size)
			if h.Name == "etc/ssl/certs/ca-certificates.crt" {
				size = "(NSS)" // changes with the x509roots module
			}
			fmt.Printf("  %s %5d:%-5d %6s %s %s\n", h.FileInfo().Mode(), h.Uid, h.Gid, size, h.ModTime.UTC().Format(time.DateTime), h.Name)
		}
		rc.Close()
	}
	// Output:
	// linux/amd64 user 65532:65532 entrypoint [/opkit]
	// layer 0:
	//   drwxr-xr-x     0:0          0 2023-11-14 22:13:20 etc/
	//   -rw-r--r--     0:0         27 2023-11-14 22:13:20 etc/group
	//   -rw-r--r--     0:0         94 2023-11-14 22:13:20 etc/passwd
	//   drwxr-xr-x     0:0          0 2023-11-14 22:13:20 etc/ssl/
	//   drwxr-xr-x     0:0          0 2023-11-14 22:13:20 etc/ssl/certs/
	//   -rw-r--r--     0:0      (NSS) 2023-11-14 22:13:20 etc/ssl/certs/ca-certificates.crt
	//   drwxr-xr-x     0:0          0 2023-11-14 22:13:20 home/
	//   drwx------ 65532:65532      0 2023-11-14 22:13:20 home/nonroot/
	//   dtrwxrwxrwx     0:0          0 2023-11-14 22:13:20 tmp/
	// layer 1:
	//   -rwxr-xr-x     0:0         13 2023-11-14 22:13:20 opkit
}
