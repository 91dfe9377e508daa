"""V-trace, GAE and PPO clipping against small cases worked out by hand."""
import math

import pytest
import torch

from nodes import losses


def test_vtrace_hand_computed_off_policy():
    # B=1, T=2, gamma=0.9; rho = [2.0, 0.5] -> clipped rho = c = [1.0, 0.5]
    rewards = torch.tensor([[1.0, 2.0]])
    values = torch.tensor([[0.5, 1.0, 2.0]])
    dones = torch.tensor([[False, False]])
    log_rhos = torch.log(torch.tensor([[2.0, 0.5]]))
    vs, adv = losses.vtrace(rewards, values, dones, log_rhos, gamma=0.9)
    # delta_1 = 0.5 * (2 + 0.9*2 - 1) = 1.4           -> vs_1 = 1 + 1.4 = 2.4
    # delta_0 = 1.0 * (1 + 0.9*1 - 0.5) = 1.4
    # vs_0 - V_0 = delta_0 + gamma * c_0 * (vs_1 - V_1) = 1.4 + 0.9 * 1.4 = 2.66 -> vs_0 = 3.16
    assert vs.tolist()[0] == pytest.approx([3.16, 2.4])
    # adv_0 = rho_0 (r_0 + gamma vs_1 - V_0) = 1 + 2.16 - 0.5 = 2.66; adv_1 = 0.5 (2 + 1.8 - 1) = 1.4
    assert adv.tolist()[0] == pytest.approx([2.66, 1.4])


def test_vtrace_done_cuts_bootstrap():
    rewards = torch.tensor([[1.0, 2.0]])
    values = torch.tensor([[0.5, 1.0, 2.0]])
    dones = torch.tensor([[True, False]])
    vs, adv = losses.vtrace(rewards, values, dones, torch.zeros(1, 2), gamma=0.9)
    # episode ended at step 0: vs_0 = r_0 = 1; vs_1 = 2 + 0.9 * 2 = 3.8 (on-policy n-step return)
    assert vs.tolist()[0] == pytest.approx([1.0, 3.8])
    assert adv.tolist()[0] == pytest.approx([0.5, 2.8])


def test_vtrace_on_policy_equals_discounted_return():
    torch.manual_seed(0)
    r = torch.randn(3, 5)
    v = torch.randn(3, 6)
    vs, _ = losses.vtrace(r, v, torch.zeros(3, 5, dtype=torch.bool), torch.zeros(3, 5), gamma=0.95)
    ret = v[:, -1].clone()
    for t in reversed(range(5)):
        ret = r[:, t] + 0.95 * ret
        if t == 0:
            assert torch.allclose(vs[:, 0], ret, atol=1e-5)


def test_gae_lambda_one_is_monte_carlo_advantage():
    r = torch.tensor([[1.0, 1.0, 1.0]])
    v = torch.tensor([[0.0, 0.0, 0.0, 10.0]])
    ret, adv = losses.gae(r, v, torch.tensor([[False, True, False]]), gamma=0.5, lam=1.0)
    # done after step 1: returns 1 + 0.5*1 = 1.5, 1, then 1 + 0.5*10 = 6
    assert ret.tolist()[0] == pytest.approx([1.5, 1.0, 6.0])
    assert adv.tolist()[0] == pytest.approx([1.5, 1.0, 6.0])


def test_ppo_clipping_value_and_gradient():
    ratio = torch.tensor([0.5, 1.5, 1.05], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss = losses.ppo_surrogate(ratio, adv, clip_ratio=0.1)
    # min(0.5, 0.9) = 0.5; min(1.5, 1.1) = 1.1; min(-1.05, -1.05) = -1.05
    assert loss.item() == pytest.approx(-(0.5 + 1.1 - 1.05) / 3)
    loss.backward()
    # the clipped term (ratio 1.5 above 1 + eps with a positive advantage) passes no gradient
    assert ratio.grad.tolist() == pytest.approx([-1 / 3, 0.0, 1 / 3])
    assert not math.isnan(loss.item())
