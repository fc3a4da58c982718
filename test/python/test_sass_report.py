"""tools/sass_report.py reads nvdisasm's output: roles split at setmaxnreg, loops at backward branches, the
waits' out-of-line retries after the last EXIT. The text below has nvdisasm's layout (abridged from the
sm_90a d128 kernel's), so the parser is tested without a CUDA toolkit."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))   # the tools import each other as scripts

from sass_report import parse_sass, role_facts  # noqa: E402

SASS = """
	.target	sm_90a
//--------------------- .text.k_dq_dk_dv --------------------------
	.section	.text.k_dq_dk_dv,"ax",@progbits
.text.k_dq_dk_dv:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   STL [R1], R4                      (*"SpillRefill"*);
        /*0020*/              @!P0 BRA `(.L_x_4) ;
        /*0030*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0 ;
.L_x_13:
        /*0040*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR12], R10 ;
        /*0050*/              @!P2 BRA `(.L_x_7) ;
.L_x_105:
        /*0060*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT ;
        /*0070*/                   LDL.LU R234, [R1]                 (*"SpillRefill"*);
.L_x_20:
        /*0080*/                   MUFU.EX2 R3, R3 ;
        /*0090*/               @P1 BRA `(.L_x_20) ;
        /*00a0*/                   STSM.16.M88.4 [R5], R8 ;
        /*00b0*/                   BRA `(.L_x_13) ;
        /*00c0*/                   EXIT ;
.L_x_4:
        /*00d0*/                   USETMAXREG.DEALLOC.CTAPOOL 0x18 ;
.L_x_30:
        /*00e0*/                   STL [R1+0x4], R12                 (*"SpillRefill"*);
        /*00f0*/                   UTMALDG.4D [UR8], [UR4] ;
        /*0100*/                   BRA `(.L_x_30) ;
        /*0110*/                   EXIT ;
.L_x_7:
        /*0120*/                   SYNCS.PHASECHK.TRANS64 P2, [UR12], R10 ;
        /*0130*/                   LDL R9, [R1]                      (*"SpillRefill"*);
        /*0140*/                   BRA `(.L_x_105) ;
//--------------------- .text.k_convert_dq --------------------------
.text.k_convert_dq:
        /*0000*/                   EXIT ;
"""


def test_roles_loops_and_spills_are_read_from_the_disassembly():
    functions = parse_sass(SASS)
    assert [f.name for f in functions] == ["k_dq_dk_dv", "k_convert_dq"]
    kernel = functions[0]
    assert kernel.labels[".L_x_13"] == 0x40 and kernel.main_end() == 0x110
    # the retry's branch back (0x140 -> 0x60) is out of line: not a loop
    assert sorted(kernel.loops()) == [(0x40, 0xb0), (0x80, 0x90), (0xe0, 0x100)]
    facts = role_facts(kernel)
    assert list(facts) == ["all threads", "consumers", "producer", "out-of-line"]
    assert (facts["all threads"]["local"], facts["all threads"]["local_in_loop"]) == (1, 0)
    consumers = facts["consumers"]
    assert (consumers["local"], consumers["local_in_loop"], consumers["matrix"]) == (1, 1, 1)
    # the step loop is the role's outermost loop: 0x40..0xb0, the inner MUFU loop inside it
    assert consumers["loop"]["instructions"] == 8
    assert consumers["loop"]["mix"]["HGMMA"] == 1 and consumers["loop"]["mix"]["STSM"] == 1
    assert (facts["producer"]["local"], facts["producer"]["local_in_loop"]) == (1, 1)
    assert facts["out-of-line"]["local"] == 1 and "loop" not in facts["out-of-line"]
