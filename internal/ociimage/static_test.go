package ociimage_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/ociimage"
)

// fakeELF is the smallest ELF executable debug/elf reads: a header and
// program headers, a PT_INTERP among them if dynamic.
func fakeELF(t *testing.T, machine elf.Machine, dynamic bool) []byte {
	t.Helper()
	progs := []elf.Prog64{{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X)}}
	if dynamic {
		progs = append([]elf.Prog64{{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R)}}, progs...)
	}
	h := elf.Header64{
		Type:      uint16(elf.ET_EXEC),
		Machine:   uint16(machine),
		Version:   uint32(elf.EV_CURRENT),
		Phoff:     64,
		Ehsize:    64,
		Phentsize: 56,
		Phnum:     uint16(len(progs)),
		Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	for _, v := range []any{h, progs} {
		if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestCheckStaticAcceptsOnlyStaticLinuxExecutablesOfThePlatform(t *testing.T) {
	for _, tc := range []struct {
		name     string
		platform string
		data     []byte
		want     string // in the error; "" for none
	}{
		{"static amd64", "linux/amd64", fakeELF(t, elf.EM_X86_64, false), ""},
		{"static arm64", "linux/arm64", fakeELF(t, elf.EM_AARCH64, false), ""},
		{"arm64 given as amd64", "linux/amd64", fakeELF(t, elf.EM_AARCH64, false), "built for EM_AARCH64, not for amd64"},
		{"dynamic", "linux/amd64", fakeELF(t, elf.EM_X86_64, true), "CGO_ENABLED=0"},
		{"not ELF", "linux/amd64", []byte("#!/bin/sh\n"), "not an ELF executable"},
		{"not Linux", "darwin/arm64", fakeELF(t, elf.EM_AARCH64, false), "Linux binaries only"},
		{"unknown architecture", "linux/vax", fakeELF(t, elf.EM_X86_64, false), `unknown architecture "vax"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ociimage.CheckStatic(tc.platform, tc.data)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
