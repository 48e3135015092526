//go:build amd64 && !purego

#include "textflag.h"

// func dotF16C(a []float32, b []uint16) float32
//
// Inner product of single-precision a and half-precision b with F16C + FMA:
// VCVTPH2PS widens eight halves of b at a time, four 8-lane accumulators run
// over blocks of 32 components, then blocks of 8, a horizontal sum, and a
// scalar tail (one half widened at a time). Reads len(a) elements of both
// slices; the Go caller checks len(b) >= len(a).
TEXT ·dotF16C(SB), NOSPLIT, $0-52
	MOVQ a_base+0(FP), SI
	MOVQ a_len+8(FP), CX
	MOVQ b_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ CX, $32
	JL   loop8
	VCVTPH2PS (DI), Y4
	VCVTPH2PS 16(DI), Y5
	VCVTPH2PS 32(DI), Y6
	VCVTPH2PS 48(DI), Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ $128, SI
	ADDQ $64, DI
	SUBQ $32, CX
	JMP  loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VCVTPH2PS (DI), Y4
	VFMADD231PS (SI), Y4, Y0
	ADDQ $32, SI
	ADDQ $16, DI
	SUBQ $8, CX
	JMP  loop8

reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0

loop1:
	CMPQ CX, $0
	JE   done
	MOVWLZX (DI), AX
	VMOVD AX, X2
	VCVTPH2PS X2, X2
	VFMADD231SS (SI), X2, X0
	ADDQ $4, SI
	ADDQ $2, DI
	DECQ CX
	JMP  loop1

done:
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET
