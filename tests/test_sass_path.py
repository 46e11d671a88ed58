"""tuner/sass.py counts what one k-tile of an interior block issues, on a hand-written SASS loop."""
from tuner import sass

# A k-tile loop: store, barrier, then an unguarded load (fast) or a bounds-checked one (guarded),
# then a rolled inner loop of one shared load and two FFMAs, then a barrier.
LOOP = """
        /*0000*/                   MOV R1, R2 ;
.L_x_1:
        /*0010*/                   STS [R1], R2 ;
        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0030*/               @P0 BRA `(.L_x_2) ;
        /*0040*/                   LDG.E R3, desc[UR4][R4.64] ;
        /*0050*/                   BRA `(.L_x_3) ;
.L_x_2:
        /*0060*/                   ISETP.GE.U32.AND P1, PT, R5, UR6, PT ;
        /*0070*/                   ISETP.GE.U32.AND P2, PT, R5, UR6, PT ;
        /*0080*/               @P1 BRA `(.L_x_3) ;
        /*0090*/                   LDG.E R3, desc[UR4][R4.64] ;
.L_x_3:
.L_x_4:
        /*00a0*/                   LDS R6, [R7] ;
        /*00b0*/                   FFMA R8, R6, R6, R8 ;
        /*00c0*/                   FFMA R9, R6, R6, R9 ;
        /*00d0*/               @P2 BRA `(.L_x_4) ;
        /*00e0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00f0*/               @P3 BRA `(.L_x_1) ;
        /*0100*/                   EXIT ;
"""


def test_the_interior_path_takes_the_unguarded_load_and_counts_inner_trips():
    path = sass.k_tile_path(LOOP, multiply_adds=8, loads=1)
    assert path["inner_trips"] == 4 and path["multiply_adds"] == 8 and path["shared_loads"] == 4
    # STS, BAR, BRA, LDG, BRA, then 4 trips of LDS, FFMA, FFMA, BRA, then BAR and the back edge.
    assert path["issued"] == 5 + 4 * 4 + 2
    assert "ISETP.GE.U32.AND" not in path["opcodes"] and path["opcodes"]["LDG.E"] == 1


SKIPPABLE = """
.L_x_1:
        /*0000*/               @P0 BRA `(.L_x_2) ;
        /*0010*/                   IADD3 R4, P1, R4, 0x40, RZ ;
        /*0020*/                   LDG.E R3, desc[UR4][R4.64] ;
.L_x_2:
        /*0030*/                   FFMA R8, R3, R3, R8 ;
        /*0040*/               @P3 BRA `(.L_x_1) ;
        /*0050*/                   EXIT ;
"""


def test_a_path_must_issue_every_load():
    """Skipping the load is cheaper, but that is what an edge block does."""
    assert sass.k_tile_path(SKIPPABLE, multiply_adds=1, loads=0)["issued"] == 3
    path = sass.k_tile_path(SKIPPABLE, multiply_adds=1, loads=1)
    assert path["issued"] == 5 and path["opcodes"]["LDG.E"] == 1


UNROLLED = """
.L_x_1:
        /*0000*/                   LDG.E R3, desc[UR4][R4.64] ;
        /*0010*/                   HMMA.1688.F32.TF32 R8, R2, R6, R8 ;
        /*0020*/                   LDG.E R3, desc[UR4][R4.64] ;
        /*0030*/                   HMMA.1688.F32.TF32 R8, R2, R6, R8 ;
        /*0040*/               @P3 BRA `(.L_x_1) ;
        /*0050*/                   EXIT ;
"""


def test_a_k_tile_loop_that_ptxas_unrolled_is_counted_per_k_tile():
    """Two k-tiles of one mma each in one trip: counts per k-tile, HMMA (with its modifiers) a multiply-add."""
    path = sass.k_tile_path(UNROLLED, multiply_adds=1, loads=1)
    assert path["k_tiles_per_trip"] == 2 and path["multiply_adds"] == 1 and path["issued"] == 2.5
    assert path["opcodes"] == {"LDG.E": 1, "HMMA.1688.F32.TF32": 1, "BRA": 0.5}
