package ociimage

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// machines are the ELF machines of the architectures Go builds for Linux.
var machines = map[string]elf.Machine{
	"386":      elf.EM_386,
	"amd64":    elf.EM_X86_64,
	"arm":      elf.EM_ARM,
	"arm64":    elf.EM_AARCH64,
	"loong64":  elf.EM_LOONGARCH,
	"ppc64le":  elf.EM_PPC64,
	"riscv64":  elf.EM_RISCV,
	"s390x":    elf.EM_S390,
	"mips64le": elf.EM_MIPS,
}

// CheckStatic says whether data can run in the image as platform: a Linux
// ELF executable for that architecture that loads no shared library, since
// the image has no dynamic loader and no C library. A Go program is one
// when built with CGO_ENABLED=0.
func CheckStatic(platform string, data []byte) error {
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		return fmt.Errorf("platform %q: %w", platform, err)
	}
	if p.OS != "linux" {
		return fmt.Errorf("platform %q: the image runs Linux binaries only (GOOS=linux)", platform)
	}
	want, ok := machines[p.Architecture]
	if !ok {
		return fmt.Errorf("platform %q: unknown architecture %q", platform, p.Architecture)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	// f needs no Close: it reads data, no file.
	if f.Machine != want {
		return fmt.Errorf("built for %s, not for %s (%s): build it with GOARCH=%s", f.Machine, p.Architecture, want, p.Architecture)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it names an ELF interpreter), and the image has no C library: build it with CGO_ENABLED=0")
		}
	}
	return nil
}
