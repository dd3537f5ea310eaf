"""jitgraph.random against JAX's published streams: Random123's Threefry known answers, and
literal values from JAX for several keys, odd and even sizes, both threefry schemes, float32 and
float64. ``docs/random.md`` lists where the numbers may differ (float32 log: a few ulp).

The literals were produced with JAX 0.10.2 on CPU: ``jax.random.<fn>(jax.random.PRNGKey(seed),
...)`` with ``jax_enable_x64=True`` (X64; bits with dtype=uint32) or False (X32), under
``jax_threefry_partitionable`` False and True (the first key of each entry).
"""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.nn.initializers as init
import jitgraph.numpy as jnp
import jitgraph.random as jr
from jitgraph import config

M = 0xFFFFFFFF

X64 = {(False, 0): {'bernoulli_f32': [False, False, False, False, True, False, True],
              'bernoulli_f64': [False, True, False, False, True, False],
              'bits23': [[2467461003, 428148500, 3186719485],
                         [3840466878, 2562233961, 1946702221]],
              'bits5': [2467461003, 428148500, 1688610540, 3840466878, 2562233961],
              'categorical': [[1, 0], [0, 2], [2, 0]],
              'fold_in': [2716826189, 292468403],
              'gumbel_f32': [3.3440380096435547, -0.1451333463191986, 0.7825522422790527],
              'normal_f32': [0.18784384429454803, -1.2833425998687744, -0.2710916996002197,
                             1.2490594387054443, 0.2444700300693512],
              'normal_f64': [0.08086788103743275, -0.38624702418001494, -0.375655579778275,
                             1.6689742332629889],
              'permutation7': [4, 1, 6, 0, 2, 5, 3],
              'permutation_axis1': [[2, 1, 3, 0], [6, 5, 7, 4]],
              'randint_i32': [5, 8, 8, -1, 8, 8, -3],
              'randint_i64': [1702037189, 2143276753, 1133800701, 1273239803, 1812973595],
              'split': [[4146024105, 967050713], [2718843009, 1272950319]],
              'split3': [[2467461003, 428148500], [3186719485, 3840466878],
                         [2562233961, 1946702221]],
              'truncated_f32': [0.17920251190662384, -1.185547947883606, -0.25847166776657104,
                                1.1564091444015503, 0.23313766717910767],
              'truncated_f64': [-0.08846568365573938, -0.8002992399512464, 0.1357234842785669],
              'uniform_f32': [0.5745004415512085, 0.09968602657318115, 0.39316022396087646,
                              0.8941782712936401, 0.5965665578842163],
              'uniform_f32_range': [2.8266072273254395, -0.8742053508758545, 1.1651496887207031,
                                    -0.5180908441543579],
              'uniform_f64': [0.5745005337275046, 0.0996860909733377, 0.7419659489424089]},
 (False, 42): {'bernoulli_f32': [False, False, True, False, False, True, True],
               'bernoulli_f64': [False, True, True, False, True, True],
               'bits23': [[3134548294, 3733159049, 3746501087],
                          [894150801, 801545058, 2363201431]],
               'bits5': [3134548294, 3733159049, 843694964, 894150801, 801545058],
               'categorical': [[2, 0], [1, 0], [2, 2]],
               'fold_in': [2547012911, 1371500959],
               'gumbel_f32': [0.5890134572982788, -0.8333456516265869, -1.0375992059707642],
               'normal_f32': [0.6122652292251587, 1.1225882768630981, -0.8544133901596069,
                              -0.8127325177192688, -0.890404999256134],
               'normal_f64': [0.4896249504757018, 0.25225754788932736, -0.6273900981852933,
                              -0.7026026743459467],
               'permutation7': [6, 0, 2, 5, 4, 3, 1],
               'permutation_axis1': [[2, 0, 1, 3], [6, 4, 5, 7]],
               'randint_i32': [5, -1, 7, 3, 5, 0, -2],
               'randint_i64': [1029176014, 1316844381, 1799239286, 1164694250, 1255576108],
               'split': [[2465931498, 3679230171], [255383827, 267815257]],
               'split3': [[3134548294, 3733159049], [3746501087, 894150801],
                          [801545058, 2363201431]],
               'truncated_f32': [0.5809472799301147, 1.046762228012085, -0.8055537343025208,
                                 -0.7672606110572815, -0.8384718298912048],
               'truncated_f64': [0.11936781925765917, 0.3101274693953123, 0.3144836117219811],
               'uniform_f32': [0.7298188209533691, 0.8691937923431396, 0.19643795490264893,
                               0.20818567276000977, 0.1866241693496704],
               'uniform_f32_range': [0.8707218170166016, 2.2831873893737793, -1.7026944160461426,
                                     -1.6882224082946777],
               'uniform_f64': [0.7298188969046309, 0.8691938242843895, 0.8723002596642415]},
 (True, 0): {'bernoulli_f32': [False, False, False, False, False, True, False],
             'bernoulli_f64': [True, True, False, False, False, True],
             'bits23': [[4070199207, 4202968722, 1427181096], [2012915765, 2447653815, 710830403]],
             'bits5': [4070199207, 4202968722, 1427181096, 2012915765, 2447653815],
             'categorical': [[1, 0], [2, 1], [2, 0]],
             'fold_in': [2716826189, 292468403],
             'gumbel_f32': [2.923372507095337, 3.83261775970459, -0.09689324349164963],
             'normal_f32': [1.622642159461975, 2.0252647399902344, -0.4335944354534149,
                            -0.07861734926700592, 0.17609089612960815],
             'normal_f64': [-0.2058421394796434, -0.7847657764467411, 1.8160866726679836,
                            0.1878440128937887],
             'permutation7': [0, 1, 5, 6, 4, 3, 2],
             'permutation_axis1': [[0, 1, 3, 2], [4, 5, 7, 6]],
             'randint_i32': [3, 6, 4, 5, 6, -3, 1],
             'randint_i64': [269967126, 437612150, 324352481, 884660570, 35906802],
             'split': [[1797259609, 2579123966], [928981903, 3453687069]],
             'split3': [[1797259609, 2579123966], [928981903, 3453687069],
                        [4146024105, 2718843009]],
             'truncated_f32': [1.4559592008590698, 1.714748740196228, -0.4126753509044647,
                               -0.07503343373537064, 0.16800101101398468],
             'truncated_f64': [-0.3012492485787645, -0.6010629457653065, 0.4481720558860737],
             'uniform_f32': [0.9476670026779175, 0.9785798788070679, 0.33229148387908936,
                             0.46866846084594727, 0.569888710975647],
             'uniform_f32_range': [2.738335132598877, 2.892899513244629, -0.3385425806045532,
                                   0.34334230422973633],
             'uniform_f64': [0.41845711171638644, 0.21629545460551136, 0.9653214611189975]},
 (True, 42): {'bernoulli_f32': [False, False, False, False, False, False, True],
              'bernoulli_f64': [True, True, False, False, False, False],
              'bits23': [[2098992034, 2919706841, 2646866425],
                         [2409546199, 1935504149, 2516274904]],
              'bits5': [2098992034, 2919706841, 2646866425, 2409546199, 1935504149],
              'categorical': [[2, 0], [2, 0], [1, 0]],
              'fold_in': [2547012911, 1371500959],
              'gumbel_f32': [0.3340933918952942, 0.952019453048706, 0.7255305647850037],
              'normal_f32': [-0.02830461598932743, 0.4671318531036377, 0.2957029640674591,
                             0.15354591608047485, -0.12403281778097153],
              'normal_f64': [-0.18471174528191162, -2.169824560397754, 0.18693555179382582,
                             0.6122653570510959],
              'permutation7': [4, 2, 5, 3, 6, 0, 1],
              'permutation_axis1': [[2, 3, 0, 1], [6, 7, 4, 5]],
              'randint_i32': [8, 9, 9, 6, -1, 7, 4],
              'randint_i64': [120654792, 1584053545, 1254118446, 433946983, 528724972],
              'split': [[1832780943, 270669613], [64467757, 2916123636]],
              'split3': [[1832780943, 270669613], [64467757, 2916123636], [2465931498, 255383827]],
              'truncated_f32': [-0.027016498148441315, 0.44438081979751587, 0.2818770706653595,
                                0.14650805294513702, -0.11836230009794235],
              'truncated_f64': [-0.28971072063226666, -0.9674773589312475, -0.08894316886548902],
              'uniform_f32': [0.48870956897735596, 0.6797971725463867, 0.6162714958190918,
                              0.5610160827636719, 0.4506446123123169],
              'uniform_f32_range': [0.4435478448867798, 1.3989858627319336, 1.081357479095459,
                                    0.8050804138183594],
              'uniform_f64': [0.4267275666499091, 0.015010069515314584, 0.5741444178995352]}}
X32 = {False: {'glorot_normal': [[0.646571934223175, -0.6547724604606628, 0.6788100600242615],
                           [0.2508018910884857, 0.11863981187343597, 0.1994030922651291]],
         'he_uniform': [[0.9356263279914856, -0.9445789456367493],
                        [0.9702878594398499, 0.40414950251579285],
                        [0.19418266415596008, 0.3236982524394989]],
         'key_big': [0, 7],
         'key_neg': [0, 4294967295],
         'randint': [20, 10, 92, 68, 49],
         'uniform': [0.5685524940490723, 0.2586038112640381, 0.8893296718597412]},
 True: {'glorot_normal': [[-0.10595116764307022, 0.058127548545598984, -0.09329649806022644],
                          [-0.10636187344789505, 0.8422490358352661, 0.10174185782670975]],
        'he_uniform': [[-0.1735735386610031, 0.09546766430139542],
                       [-0.15296608209609985, -0.17424146831035614],
                       [1.123911738395691, 0.16672450304031372]],
        'key_big': [0, 7],
        'key_neg': [0, 4294967295],
        'randint': [96, 27, 40, 53, 68],
        'uniform': [0.4386324882507324, 0.5337529182434082, 0.44591832160949707]}}

# jax.nn.initializers.<name>()(jax.random.PRNGKey(3), shape, dtype), with x64
INIT = {False: {'glorot_normal_float64': [[0.46725871188168944, 0.6829198663198172, -0.3186958142422015,
                                    0.3058623935339642],
                                   [-0.051802146288453955, 0.15532700041902808, 0.0765736543644931,
                                    -0.47841031407973567],
                                   [0.24461265924058623, -1.098364404364064, 0.8837685341904518,
                                    -0.6680212751119947]],
         'he_normal_conv_float32': [[[[0.35687455534935, 0.5215885043144226],
                                      [-0.2434079945087433, 0.23360618948936462],
                                      [-0.039564646780490875, 0.11863285303115845]],
                                     [[0.0584840327501297, -0.36539211869239807],
                                      [0.1868259161710739, -0.8388900756835938],
                                      [0.6749893426895142, -0.510209858417511]]],
                                    [[[0.03417179360985756, -0.4678546190261841],
                                      [-0.32858535647392273, -0.1155310794711113],
                                      [-0.34709569811820984, 0.10762301087379456]],
                                     [[-0.909080982208252, -0.011711301282048225],
                                      [-0.1321241408586502, -0.8797379732131958],
                                      [0.728269636631012, 0.33925169706344604]]]],
         'lecun_uniform_float64': [[0.584670435418722, 0.7741395412666487, -0.4191074225925564,
                                    0.40363755700971105],
                                   [-0.07117347362718096, 0.21136566465536966, 0.10505757993200415,
                                    -0.5960037789822303],
                                   [0.3276214321994235, -0.9736154414682834, 0.8948688786303385,
                                    -0.7630901705565138]]},
 True: {'glorot_normal_float64': [[0.6266062574752692, -0.06817876801279545, -0.40903737821384323,
                                   -0.473984473880771],
                                  [-0.2745849620683495, 0.10783087837758328, 0.6180492250005493,
                                   0.17150234488255325],
                                  [0.9155709189998219, 0.4651558050143083, -0.07953202330996514,
                                   0.06004167912101391]],
        'he_normal_conv_float32': [[[[-0.6125892400741577, 0.6465704441070557],
                                     [0.16907301545143127, 0.7819119691848755],
                                     [-0.25892311334609985, 0.09271004050970078]],
                                    [[-0.5352287888526917, -0.13332413136959076],
                                     [-0.35204488039016724, -0.4913150668144226],
                                     [0.27900567650794983, -0.4395982325077057]]],
                                   [[[-0.2301715463399887, -0.2872404158115387],
                                     [0.7526713013648987, -0.5323193669319153],
                                     [0.016046646982431412, 0.09707007557153702]],
                                    [[0.31268998980522156, -0.3617841899394989],
                                     [0.17850737273693085, -0.452910840511322],
                                     [-0.32837873697280884, 0.5588112473487854]]]],
        'lecun_uniform_float64': [[0.7307858000558514, -0.09359117806128125, -0.5229246380709842,
                                   -0.5915251840823812],
                                  [-0.36525282865025144, 0.1475587203310078, 0.7238184035666526,
                                   0.2328258845889435],
                                  [0.909491986388419, 0.582515160048032, -0.1090937131981562,
                                   0.082459899912394]]}}


@pytest.mark.parametrize("key,count,want", [
    # Random123's known-answer vectors for Threefry-2x32-20 (also in JAX's tests)
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((M, M), (M, M), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry_known_answers(key, count, want):
    got = jr.threefry2x32(*(np.int64(v) for v in key + count))
    assert tuple(int(g) for g in got) == want


def _ulps(got, want, dtype) -> int:
    """The largest distance in units in the last place between two float arrays."""
    it = np.int32 if np.dtype(dtype) == np.float32 else np.int64
    g = np.asarray(got, dtype).view(it).astype(np.int64)
    w = np.asarray(want, dtype).view(it).astype(np.int64)
    return int(np.max(np.abs(g - w)))


def _draws(k):
    """Every sampler's value for key ``k``, named as in the literals."""
    lg = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], np.float32))
    f32, f64 = jnp.float32, jnp.float64
    return {
        "split": jr.split(k), "split3": jr.split(k, 3), "fold_in": jr.fold_in(k, 7),
        "bits5": jr.bits(k, (5,)), "bits23": jr.bits(k, (2, 3)),
        "uniform_f32": jr.uniform(k, (5,), f32),
        "uniform_f32_range": jr.uniform(k, (4,), f32, -2.0, 3.0),
        "uniform_f64": jr.uniform(k, (3,), f64),
        "normal_f32": jr.normal(k, (5,), f32), "normal_f64": jr.normal(k, (4,), f64),
        "truncated_f32": jr.truncated_normal(k, -2.0, 2.0, (5,), f32),
        "truncated_f64": jr.truncated_normal(k, -1.0, 0.5, (3,), f64),
        "gumbel_f32": jr.gumbel(k, (3,), f32),
        "bernoulli_f32": jr.bernoulli(k, np.float32(0.3), (7,)),
        "bernoulli_f64": jr.bernoulli(k, 0.5, (6,)),
        "randint_i32": jr.randint(k, (7,), -3, 10, jnp.int32),
        "randint_i64": jr.randint(k, (5,), 0, 2 ** 31 - 5, jnp.int64),
        "permutation7": jr.permutation(k, 7),
        "permutation_axis1": jr.permutation(k, np.arange(8).reshape(2, 4), axis=1),
        "categorical": jr.categorical(k, lg, shape=(3, 2)),
    }


# Within a few ulp (docs/random.md): float32 where JAX's float32 log (XLA's own polynomial)
# rounds otherwise than NumPy's; float64 erfinv, whose multiply-adds XLA fuses and jitgraph
# rounds twice. Measured over 4000 draws: <= 3 ulp; gumbel float32 <= 4.8e-7 absolute.
# Everything else is JAX's bits.
_NEAR = {"normal_f32": 4, "truncated_f32": 4, "normal_f64": 4, "truncated_f64": 4}
_ABS = {"gumbel_f32": 1e-6}


@pytest.mark.parametrize("partitionable,seed", sorted(X64))
def test_samplers_match_jax(partitionable, seed):
    with config.threefry_partitionable(partitionable):
        got = _draws(jr.key(seed))
    for name, want in X64[(partitionable, seed)].items():
        g = np.asarray(got[name])
        assert g.shape == np.shape(want), name
        if name in _NEAR:
            assert _ulps(g, want, g.dtype) <= _NEAR[name], name
        elif name in _ABS:
            np.testing.assert_allclose(g, want, rtol=0, atol=_ABS[name], err_msg=name)
        else:                # bit for bit: words, keys, integers, booleans, float64 samples
            np.testing.assert_array_equal(g, np.asarray(want, g.dtype), err_msg=name)
            if name.startswith("uniform_f32"):
                assert g.dtype == np.float32, name


@pytest.mark.parametrize("partitionable", [False, True])
def test_32_bit_defaults_match_jax_without_x64(partitionable):
    """``jax_enable_x64=False``: int32 seeds (the low 32 bits), int32 randint, float32
    uniforms and initializers, as JAX without x64."""
    want = X32[partitionable]
    with config.threefry_partitionable(partitionable), config.enable_x64(False):
        np.testing.assert_array_equal(jr.key(-1), want["key_neg"])
        np.testing.assert_array_equal(jr.key(2 ** 32 + 7), want["key_big"])
        r = jr.randint(jr.key(1), (5,), 0, 100)
        assert r.dtype == np.int32
        np.testing.assert_array_equal(r, want["randint"])
        u = jr.uniform(jr.key(1), (3,))
        assert u.dtype == np.float32
        np.testing.assert_array_equal(u, np.asarray(want["uniform"], np.float32))
        g = init.glorot_normal()(jr.key(1), (2, 3))      # truncated, as JAX's
        assert g.dtype == np.float32
        assert _ulps(g, want["glorot_normal"], np.float32) <= 4
        h = init.he_uniform()(jr.key(1), (3, 2))
        np.testing.assert_array_equal(h, np.asarray(want["he_uniform"], np.float32))
    np.testing.assert_array_equal(jr.key(-1), [M, M])     # 64-bit seeds again


def test_vmap_over_keys_gives_each_keys_stream():
    """Batched keys (``vmap``) draw each key's JAX stream (``jit``'s are compared with the
    eager ones in test_random.py)."""
    both = np.stack([jr.key(0), jr.key(42)])
    vb = jitgraph.vmap(lambda k: jr.bits(k, (5,)))(both)
    np.testing.assert_array_equal(vb, [X64[(True, 0)]["bits5"], X64[(True, 42)]["bits5"]])
    vu = jitgraph.vmap(lambda k: jr.uniform(k, (4,), jnp.float32, -2.0, 3.0))(both)
    np.testing.assert_array_equal(vu, np.asarray([X64[(True, s)]["uniform_f32_range"]
                                                  for s in (0, 42)], np.float32))


@pytest.mark.parametrize("partitionable", [False, True])
def test_initializers_match_jax(partitionable):
    """JAX's initializers' numbers (the ``*_normal`` ones truncated), float32 and float64."""
    want = INIT[partitionable]
    with config.threefry_partitionable(partitionable):
        k = jr.key(3)
        got = {"glorot_normal_float64": init.glorot_normal()(k, (3, 4), np.float64),
               "he_normal_conv_float32": init.he_normal()(k, (2, 2, 3, 2), np.float32),
               "lecun_uniform_float64": init.lecun_uniform()(k, (3, 4), np.float64)}
    for name, g in got.items():
        if name == "glorot_normal_float64":          # (float64 erfinv: see _NEAR)
            assert _ulps(g, want[name], np.float64) <= 4
        else:
            np.testing.assert_array_equal(g, np.asarray(want[name], g.dtype), err_msg=name)
